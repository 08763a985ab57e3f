// torchtitan's initialisation of its dense decoders (Llama 3, Qwen3) (see shared REFERENCE.md, "Model init").
#include <cmath>

#include "ctitan/models/common/transformer.h"

namespace ctitan::models {
namespace {

// Normal(0, std) truncated to the absolute interval [lo, hi], by inverse-CDF sampling as
// torch.nn.init.trunc_normal_ does, so that no sample is redrawn and the RNG advances predictably.
void trunc_normal_(torch::Tensor w, double std, double lo = -2.0, double hi = 2.0) {
  auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  double l = cdf(lo / std), u = cdf(hi / std);
  w.uniform_(2 * l - 1, 2 * u - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(lo, hi);
}

}  // namespace

void init_weights(TransformerImpl& model) {
  torch::NoGradGuard no_grad;
  const auto& args = model.args();
  torch::nn::init::normal_(model.tok_embeddings->weight, 0.0, 1.0);
  for (auto* block_ptr : model.blocks()) {
    auto& block = *block_ptr;
    // Depth init: the projections that write into the residual stream shrink with depth.
    double depth_std = 0.02 / std::sqrt(2.0 * double(block.layer_id + 1));
    trunc_normal_(block.attention->wq->weight, 0.02);
    trunc_normal_(block.attention->wk->weight, 0.02);
    trunc_normal_(block.attention->wv->weight, 0.02);
    trunc_normal_(block.attention->wo->weight, depth_std);
    trunc_normal_(block.feed_forward->w1->weight, 0.02);
    trunc_normal_(block.feed_forward->w2->weight, depth_std);
    trunc_normal_(block.feed_forward->w3->weight, depth_std);
    if (block.attention->q_norm) {
      block.attention->q_norm->reset_parameters();
      block.attention->k_norm->reset_parameters();
    }
    block.attention_norm->reset_parameters();
    block.ffn_norm->reset_parameters();
  }
  model.norm->reset_parameters();
  if (model.output) {  // tied: the embedding's normal(0, 1) serves both
    double out_std = 1.0 / std::sqrt(double(args.dim));
    trunc_normal_(model.output->weight, out_std, -3 * out_std, 3 * out_std);
  }
}

}  // namespace ctitan::models
