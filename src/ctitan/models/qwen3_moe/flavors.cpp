#include "ctitan/models/qwen3_moe/flavors.h"

#include "ctitan/models/qwen3_moe/hf_adapter.h"

namespace ctitan::models::qwen3_moe {
namespace {

ModelArgs qwen3_moe(const ModelArgs& base, int64_t dim, int64_t n_layers, int64_t n_heads, int64_t expert_hidden,
                    int64_t dense_hidden) {
  ModelArgs a = base;
  a.dim = dim;
  a.n_layers = n_layers;
  a.n_heads = n_heads;
  a.moe.hidden_dim = expert_hidden;
  a.ffn_dim = dense_hidden;  // HF's intermediate_size: unused (no dense layer), kept for its config.json
  return a;
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.name = "qwen3_moe";
  // Shared by the released Qwen3-MoE models: 4 kv heads of 128, QK-norm, θ 1e6, eps 1e-6, the
  // 151,936 token vocabulary, 40,960 positions, untied; 128 experts, 8 per token, softmax scores
  // renormalised over the 8 (norm_topk_prob), no shared expert. The selection bias of
  // auxiliary-loss-free balancing is torchtitan's (coefficient 1e-3); HF's model has none and
  // trains with an auxiliary loss instead, so an export of a trained bias warns (hf_export.cpp).
  ModelArgs base;
  base.family = s.name;
  base.n_kv_heads = 4;
  base.explicit_head_dim = 128;
  base.vocab_size = 151936;
  base.norm_eps = 1e-6;
  base.rope_theta = 1e6;
  base.max_seq_len = 40960;
  base.qk_norm = true;
  base.moe.num_experts = 128;
  base.moe.top_k = 8;
  base.moe.score_func = RouterScore::kSoftmax;
  base.moe.route_norm = true;

  // Small enough for CPU tests, with every Qwen3-MoE feature: GQA, QK-norm, head_dim (32) apart
  // from dim / n_heads, top-k renormalised routing. Smaller than torchtitan's debugmodel_moe (64
  // experts of 768 over dim 256, 8 layers: 302M parameters): 8 experts of 256, top 2, 4 layers.
  ModelArgs debug = base;
  debug.dim = 256; debug.n_layers = 4; debug.n_heads = 4; debug.n_kv_heads = 2; debug.explicit_head_dim = 32;
  debug.vocab_size = 2048; debug.max_seq_len = 4096; debug.ffn_dim = 768;
  debug.moe.num_experts = 8; debug.moe.top_k = 2; debug.moe.hidden_dim = 256;

  s.flavors = {
      {"debugmodel", debug},
      {"30B-A3B", qwen3_moe(base, 2048, 48, 32, 768, 6144)},
      {"235B-A22B", qwen3_moe(base, 4096, 94, 64, 1536, 12288)},
  };
  s.hf_base = base;
  s.parallelize_plan = decoder_plan;  // the shared decoder's modules, MoE layers whole on each tp rank
  s.hf = {"Qwen3MoeForCausalLM", "qwen3_moe",
          {{"use_sliding_window", false}, {"sliding_window", nullptr}, {"max_window_layers", 28},
           {"decoder_sparse_step", 1}, {"mlp_only_layers", nlohmann::json::array()},
           {"output_router_logits", false}, {"router_aux_loss_coef", 0.001}},
          write_hf_config, read_hf_config};
  return s;
}

}  // namespace ctitan::models::qwen3_moe
