#include "ctitan/models/llama/args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "ctitan/common/error.h"

namespace ctitan::models::llama {

int64_t ModelArgs::ffn_hidden_dim() const {
  // Llama's SwiGLU keeps the parameter count of a 4·dim MLP: 2/3 of 4·dim per matrix, three matrices.
  auto hidden = static_cast<int64_t>(2 * (4 * dim) / 3);
  if (ffn_dim_multiplier) hidden = static_cast<int64_t>(*ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

namespace {

const std::map<std::string, ModelArgs>& flavors() {
  static const std::map<std::string, ModelArgs> table = [] {
    std::map<std::string, ModelArgs> t;
    ModelArgs debug;
    debug.dim = 256; debug.n_layers = 6; debug.n_heads = 16; debug.vocab_size = 2048;
    debug.rope_theta = 500000;
    t["debugmodel"] = debug;

    // The benchmark size: GPT-2-small widths with Llama 3 blocks.
    ModelArgs m134;
    m134.dim = 768; m134.n_layers = 12; m134.n_heads = 12; m134.vocab_size = 32000;
    t["134M"] = m134;

    ModelArgs m8b;
    m8b.dim = 4096; m8b.n_layers = 32; m8b.n_heads = 32; m8b.n_kv_heads = 8;
    m8b.ffn_dim_multiplier = 1.3; m8b.multiple_of = 1024; m8b.max_seq_len = 8192;
    t["8B"] = m8b;

    ModelArgs m70b;
    m70b.dim = 8192; m70b.n_layers = 80; m70b.n_heads = 64; m70b.n_kv_heads = 8;
    m70b.ffn_dim_multiplier = 1.3; m70b.multiple_of = 4096; m70b.max_seq_len = 8192;
    t["70B"] = m70b;

    ModelArgs m405b;
    m405b.dim = 16384; m405b.n_layers = 126; m405b.n_heads = 128; m405b.n_kv_heads = 8;
    m405b.ffn_dim_multiplier = 1.2; m405b.multiple_of = 4096; m405b.max_seq_len = 8192;
    t["405B"] = m405b;
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::string> llama3_flavor_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : flavors()) names.push_back(name);
  return names;
}

ModelArgs llama3_flavor(const std::string& flavor) {
  auto it = flavors().find(flavor);
  if (it == flavors().end()) {
    throw ConfigError(fmt::format("model.flavor '{}' is unknown (known: {})", flavor,
                                  fmt::join(llama3_flavor_names(), ", ")));
  }
  return it->second;
}

}  // namespace ctitan::models::llama
