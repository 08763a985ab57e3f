#include "ctitan/models/qwen3/flavors.h"

namespace ctitan::models::qwen3 {
namespace {

ModelArgs qwen3(const ModelArgs& base, int64_t dim, int64_t n_layers, int64_t n_heads, int64_t ffn_dim, bool tied) {
  ModelArgs a = base;
  a.dim = dim;
  a.n_layers = n_layers;
  a.n_heads = n_heads;
  a.ffn_dim = ffn_dim;
  a.tie_word_embeddings = tied;
  return a;
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.name = "qwen3";
  // Shared by every Qwen3 dense model: 8 kv heads of 128, QK-norm, θ 1e6, eps 1e-6, the 151,936
  // token vocabulary, 40,960 positions.
  ModelArgs base;
  base.family = s.name;
  base.n_kv_heads = 8;
  base.explicit_head_dim = 128;
  base.vocab_size = 151936;
  base.norm_eps = 1e-6;
  base.rope_theta = 1e6;
  base.max_seq_len = 40960;
  base.qk_norm = true;

  // Small enough for CPU tests, with every Qwen3 feature: head_dim (32) apart from dim / n_heads
  // (256 / 4 = 64), GQA, QK-norm. Untied, so that it trains in every layout (tied embeddings are
  // one process or DDP only: docs/MODELS.md).
  ModelArgs debug = base;
  debug.dim = 256; debug.n_layers = 6; debug.n_heads = 4; debug.n_kv_heads = 2; debug.explicit_head_dim = 32;
  debug.ffn_dim = 768; debug.vocab_size = 2048; debug.max_seq_len = 4096;

  s.flavors = {
      {"debugmodel", debug},
      {"0.6B", qwen3(base, 1024, 28, 16, 3072, true)},
      {"1.7B", qwen3(base, 2048, 28, 16, 6144, true)},
      {"4B", qwen3(base, 2560, 36, 32, 9728, true)},
      {"8B", qwen3(base, 4096, 36, 32, 12288, false)},
      {"14B", qwen3(base, 5120, 40, 40, 17408, false)},
      {"32B", qwen3(base, 5120, 64, 64, 25600, false)},
  };
  s.hf_base = base;
  s.parallelize_plan = decoder_plan;  // the shared decoder's modules
  s.hf = {"Qwen3ForCausalLM", "qwen3", {{"use_sliding_window", false}, {"sliding_window", nullptr}, {"max_window_layers", 28}}};
  return s;
}

}  // namespace ctitan::models::qwen3
