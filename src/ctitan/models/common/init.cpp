// torchtitan's initialisation of its decoders (Llama 3, Qwen3, Qwen3-MoE) (see shared REFERENCE.md, "Model init").
#include <cmath>

#include "ctitan/models/common/deferred_init.h"
#include "ctitan/models/common/transformer.h"

namespace ctitan::models {
namespace {

// Normal(0, std) truncated to the absolute interval [lo, hi], by inverse-CDF sampling as
// torch.nn.init.trunc_normal_ does, so that no sample is redrawn and the RNG advances predictably.
void trunc_normal_(const torch::Tensor& w, double std, double lo = -2.0, double hi = 2.0) {
  auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  double l = cdf(lo / std), u = cdf(hi / std);
  w.uniform_(2 * l - 1, 2 * u - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(lo, hi);
}

}  // namespace

std::vector<InitialDraw> initial_draws(const TransformerImpl& model) {
  const auto& args = model.args();
  const auto shape = [](const torch::Tensor& p) { return p.sizes().vec(); };
  const auto ones = [](const torch::Tensor& w) { w.fill_(1.0); };
  std::vector<InitialDraw> draws;
  draws.push_back({"tok_embeddings.weight", shape(model.tok_embeddings->weight),
                   [](const torch::Tensor& w) { torch::nn::init::normal_(w, 0.0, 1.0); }});
  for (auto* block : model.blocks()) {
    const std::string prefix = "layers." + std::to_string(block->layer_id) + ".";
    // Depth init: the projections that write into the residual stream shrink with depth.
    const double depth_std = 0.02 / std::sqrt(2.0 * double(block->layer_id + 1));
    const auto trunc = [](double sd) { return [sd](const torch::Tensor& w) { trunc_normal_(w, sd); }; };
    if (block->attention) {
      auto& attention = *block->attention;
      draws.push_back({prefix + "attention.wq.weight", shape(attention.wq->weight), trunc(0.02)});
      draws.push_back({prefix + "attention.wk.weight", shape(attention.wk->weight), trunc(0.02)});
      draws.push_back({prefix + "attention.wv.weight", shape(attention.wv->weight), trunc(0.02)});
      draws.push_back({prefix + "attention.wo.weight", shape(attention.wo->weight), trunc(depth_std)});
    } else {
      // Latent attention (torchtitan's deepseek_v3 init): the input projections at 0.02, the
      // output depth-scaled, the latents' norms at 1.
      auto& mla = *block->latent_attention;
      if (mla.wq) {
        draws.push_back({prefix + "attention.wq.weight", shape(mla.wq->weight), trunc(0.02)});
      } else {
        draws.push_back({prefix + "attention.wq_a.weight", shape(mla.wq_a->weight), trunc(0.02)});
        draws.push_back({prefix + "attention.q_norm.weight", shape(mla.q_norm->weight), ones});
        draws.push_back({prefix + "attention.wq_b.weight", shape(mla.wq_b->weight), trunc(0.02)});
      }
      draws.push_back({prefix + "attention.wkv_a.weight", shape(mla.wkv_a->weight), trunc(0.02)});
      draws.push_back({prefix + "attention.kv_norm.weight", shape(mla.kv_norm->weight), ones});
      draws.push_back({prefix + "attention.wkv_b.weight", shape(mla.wkv_b->weight), trunc(0.02)});
      draws.push_back({prefix + "attention.wo.weight", shape(mla.wo->weight), trunc(depth_std)});
    }
    // A SwiGLU's gate projection at 0.02, the other two depth-scaled: the dense feed_forward,
    // each expert, the shared experts (torchtitan's FeedForward and GroupedExperts alike).
    const auto swiglu = [&](const std::string& path, const torch::Tensor& w1, const torch::Tensor& w2,
                            const torch::Tensor& w3) {
      draws.push_back({prefix + path + "w1" + (w1.dim() == 2 ? ".weight" : ""), shape(w1), trunc(0.02)});
      draws.push_back({prefix + path + "w2" + (w2.dim() == 2 ? ".weight" : ""), shape(w2), trunc(depth_std)});
      draws.push_back({prefix + path + "w3" + (w3.dim() == 2 ? ".weight" : ""), shape(w3), trunc(depth_std)});
    };
    if (block->moe) {
      auto& moe = *block->moe;
      draws.push_back({prefix + "moe.router.gate.weight", shape(moe.router->gate->weight), trunc(depth_std)});
      swiglu("moe.experts.", moe.experts->w1, moe.experts->w2, moe.experts->w3);
      if (moe.shared_experts) {
        auto& shared = *moe.shared_experts;
        swiglu("moe.shared_experts.", shared.w1->weight, shared.w2->weight, shared.w3->weight);
      }
    } else {
      auto& ffn = *block->feed_forward;
      swiglu("feed_forward.", ffn.w1->weight, ffn.w2->weight, ffn.w3->weight);
    }
    if (block->attention && block->attention->q_norm) {
      draws.push_back({prefix + "attention.q_norm.weight", shape(block->attention->q_norm->weight), ones});
      draws.push_back({prefix + "attention.k_norm.weight", shape(block->attention->k_norm->weight), ones});
    }
    draws.push_back({prefix + "attention_norm.weight", shape(block->attention_norm->weight), ones});
    draws.push_back({prefix + "ffn_norm.weight", shape(block->ffn_norm->weight), ones});
  }
  draws.push_back({"norm.weight", shape(model.norm->weight), ones});
  if (model.output) {  // tied: the embedding's normal(0, 1) serves both
    const double out_std = 1.0 / std::sqrt(double(args.dim));
    draws.push_back({"output.weight", shape(model.output->weight),
                     [out_std](const torch::Tensor& w) { trunc_normal_(w, out_std, -3 * out_std, 3 * out_std); }});
  }
  return draws;
}

void init_weights(TransformerImpl& model) {
  torch::NoGradGuard no_grad;
  auto params = model.named_parameters();
  for (const auto& d : initial_draws(model)) d.draw(params[d.fqn]);
}

}  // namespace ctitan::models
