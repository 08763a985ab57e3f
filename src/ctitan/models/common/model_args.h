#pragma once
// The shape of a decoder-only transformer (models/common/transformer.h), family-neutral: each
// family's flavors (models/<family>/flavors.cpp) fill it in, with the features the family uses.
#include <cstdint>
#include <optional>
#include <string>

namespace ctitan::models {

struct ModelArgs {
  std::string family;                           // model.name of the registry entry (model_spec.h); "" = the default
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 0;                       // 0 = n_heads (no GQA)
  int64_t explicit_head_dim = 0;                // 0 = dim / n_heads (Llama); Qwen3 sets it apart from dim
  int64_t vocab_size = 128256;
  // FFN hidden size: `ffn_dim` when set (Qwen3, HF configs), else Llama's rule: 8/3·dim, scaled by
  // ffn_dim_multiplier, rounded up to a multiple of multiple_of.
  int64_t ffn_dim = 0;
  int64_t multiple_of = 256;
  std::optional<double> ffn_dim_multiplier;
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  int64_t max_seq_len = 2048;                   // RoPE table length
  bool qk_norm = false;                         // RMSNorm over head_dim on each query and key head (Qwen3)
  bool tie_word_embeddings = false;             // the output layer reads tok_embeddings' weight

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : dim / n_heads; }
  int64_t ffn_hidden_dim() const;
};

}  // namespace ctitan::models
