#include "ctitan/models/common/parameter_shapes.h"

#include <fmt/format.h>

namespace ctitan::models {

std::map<std::string, std::vector<int64_t>> parameter_shapes(const ModelArgs& args) {
  int64_t d = args.dim, hd = args.head_dim(), ffn = args.ffn_hidden_dim();
  std::map<std::string, std::vector<int64_t>> shapes{
      {"tok_embeddings.weight", {args.vocab_size, d}},
      {"norm.weight", {d}},
  };
  if (!args.tie_word_embeddings) shapes["output.weight"] = {args.vocab_size, d};
  for (int64_t i = 0; i < args.n_layers; ++i) {
    auto p = fmt::format("layers.{}.", i);
    if (args.latent_attention()) {
      const int64_t heads = args.n_heads, qk = args.qk_head_dim(), kv = args.kv_lora_rank;
      if (args.q_lora_rank == 0) {
        shapes[p + "attention.wq.weight"] = {heads * qk, d};
      } else {
        shapes[p + "attention.wq_a.weight"] = {args.q_lora_rank, d};
        shapes[p + "attention.q_norm.weight"] = {args.q_lora_rank};
        shapes[p + "attention.wq_b.weight"] = {heads * qk, args.q_lora_rank};
      }
      shapes[p + "attention.wkv_a.weight"] = {kv + args.qk_rope_head_dim, d};
      shapes[p + "attention.kv_norm.weight"] = {kv};
      shapes[p + "attention.wkv_b.weight"] = {heads * (args.qk_nope_head_dim + args.v_head_dim), kv};
      shapes[p + "attention.wo.weight"] = {d, heads * args.v_head_dim};
    } else {
      shapes[p + "attention.wq.weight"] = {args.n_heads * hd, d};
      shapes[p + "attention.wk.weight"] = {args.kv_heads() * hd, d};
      shapes[p + "attention.wv.weight"] = {args.kv_heads() * hd, d};
      shapes[p + "attention.wo.weight"] = {d, args.n_heads * hd};
    }
    if (args.qk_norm) {
      shapes[p + "attention.q_norm.weight"] = {hd};
      shapes[p + "attention.k_norm.weight"] = {hd};
    }
    if (args.is_moe_layer(i)) {
      const auto& moe = args.moe;
      const int64_t e = moe.num_experts, h = moe.hidden_dim, shared = moe.hidden_dim * moe.num_shared_experts;
      shapes[p + "moe.router.gate.weight"] = {e, d};
      shapes[p + "moe.experts.w1"] = {e, h, d};
      shapes[p + "moe.experts.w2"] = {e, d, h};
      shapes[p + "moe.experts.w3"] = {e, h, d};
      if (shared > 0) {
        shapes[p + "moe.shared_experts.w1.weight"] = {shared, d};
        shapes[p + "moe.shared_experts.w2.weight"] = {d, shared};
        shapes[p + "moe.shared_experts.w3.weight"] = {shared, d};
      }
    } else {
      shapes[p + "feed_forward.w1.weight"] = {ffn, d};
      shapes[p + "feed_forward.w2.weight"] = {d, ffn};
      shapes[p + "feed_forward.w3.weight"] = {ffn, d};
    }
    shapes[p + "attention_norm.weight"] = {d};
    shapes[p + "ffn_norm.weight"] = {d};
  }
  return shapes;
}

std::map<std::string, std::vector<int64_t>> buffer_shapes(const ModelArgs& args) {
  std::map<std::string, std::vector<int64_t>> shapes;
  if (args.moe.load_balance_coeff <= 0) return shapes;
  for (int64_t i = 0; i < args.n_layers; ++i) {
    if (args.is_moe_layer(i)) shapes[fmt::format("layers.{}.moe.expert_bias", i)] = {args.moe.num_experts};
  }
  return shapes;
}

}  // namespace ctitan::models
