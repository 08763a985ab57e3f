#include "ctitan/models/llama3/flavors.h"

namespace ctitan::models::llama3 {

ModelSpec spec() {
  ModelSpec s;
  s.name = "llama3";
  ModelArgs base;
  base.family = s.name;

  ModelArgs debug = base;
  debug.dim = 256; debug.n_layers = 6; debug.n_heads = 16; debug.vocab_size = 2048;
  debug.rope_theta = 500000;

  // The benchmark size: GPT-2-small widths with Llama 3 blocks.
  ModelArgs m134 = base;
  m134.dim = 768; m134.n_layers = 12; m134.n_heads = 12; m134.vocab_size = 32000;

  ModelArgs m8b = base;
  m8b.dim = 4096; m8b.n_layers = 32; m8b.n_heads = 32; m8b.n_kv_heads = 8;
  m8b.ffn_dim_multiplier = 1.3; m8b.multiple_of = 1024; m8b.max_seq_len = 8192;

  ModelArgs m70b = base;
  m70b.dim = 8192; m70b.n_layers = 80; m70b.n_heads = 64; m70b.n_kv_heads = 8;
  m70b.ffn_dim_multiplier = 1.3; m70b.multiple_of = 4096; m70b.max_seq_len = 8192;

  ModelArgs m405b = base;
  m405b.dim = 16384; m405b.n_layers = 126; m405b.n_heads = 128; m405b.n_kv_heads = 8;
  m405b.ffn_dim_multiplier = 1.2; m405b.multiple_of = 4096; m405b.max_seq_len = 8192;

  // Listed as before the registry (alphabetically), so `model.flavor` errors read the same.
  s.flavors = {{"134M", m134}, {"405B", m405b}, {"70B", m70b}, {"8B", m8b}, {"debugmodel", debug}};
  s.hf_base = base;
  s.parallelize_plan = decoder_plan;  // the shared decoder's modules
  s.hf = {"LlamaForCausalLM", "llama", {{"mlp_bias", false}, {"pretraining_tp", 1}}};
  return s;
}

}  // namespace ctitan::models::llama3
