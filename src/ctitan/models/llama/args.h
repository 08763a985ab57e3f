#pragma once
// Llama 3 model hyperparameters and the named flavors (torchtitan's llama3 registry).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ctitan::models::llama {

struct ModelArgs {
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 0;                       // 0 = n_heads (no GQA)
  int64_t vocab_size = 128256;
  int64_t multiple_of = 256;                    // FFN hidden size is rounded up to this
  std::optional<double> ffn_dim_multiplier;     // scales the 8/3·dim FFN size before rounding
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  int64_t max_seq_len = 2048;                   // RoPE table length

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_dim() const { return dim / n_heads; }
  int64_t ffn_hidden_dim() const;
};

// Returns the named flavor, or throws ConfigError naming model.flavor and the known names.
ModelArgs llama3_flavor(const std::string& flavor);
std::vector<std::string> llama3_flavor_names();

}  // namespace ctitan::models::llama
