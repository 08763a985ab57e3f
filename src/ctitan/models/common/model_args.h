#pragma once
// The shape of a decoder-only transformer (models/common/transformer.h), family-neutral: each
// family's flavors (models/<family>/flavors.cpp) fill it in, with the features the family uses.
#include <cstdint>
#include <optional>
#include <string>

namespace ctitan::models {

// How a router turns its logits into expert scores.
enum class RouterScore { kSoftmax, kSigmoid };

// A mixture-of-experts feed-forward (models/common/moe.h), as torchtitan's MoEArgs; num_experts 0
// means every layer is dense.
struct MoeArgs {
  int64_t num_experts = 0;
  int64_t top_k = 1;                     // experts each token is routed to
  int64_t hidden_dim = 0;                // each expert's SwiGLU hidden size (HF moe_intermediate_size)
  int64_t num_shared_experts = 0;        // one SwiGLU of hidden_dim x this, seen by every token
  RouterScore score_func = RouterScore::kSoftmax;
  bool route_norm = false;               // renormalise the top-k scores to sum to 1 (HF norm_topk_prob)
  double route_scale = 1.0;              // then scale them (HF routed_scaling_factor)
  int64_t num_expert_groups = 0;         // group-limited routing: experts in this many groups ...
  int64_t num_limited_groups = 0;        // ... of which each token may use the best this many; 0 = off
  // Auxiliary-loss-free balancing (DeepSeek-V3): each step every expert's selection bias moves by
  // this toward the mean load; 0 = no bias.
  double load_balance_coeff = 1e-3;
  int64_t n_dense_layers = 0;            // the first layers keep a dense feed_forward (HF first_k_dense_replace)
  // > 0: each expert takes at most ceil(capacity_factor x N k / E) of a forward's N k choices,
  // the first in token order; the rest are dropped (they add nothing). 0: no token is dropped.
  double capacity_factor = 0;
  // > 0: DeepSeek-V3's sequence-wise balance loss, alpha x sum_e f_e P_e per sequence, averaged
  // over the step's sequences and added to the training loss (f_e: the sequence's share of
  // choices for expert e, times E / k; P_e: its mean normalised score for e).
  double aux_loss_alpha = 0;
};

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
  MoeArgs moe;                                  // experts in place of the dense feed_forward
  // Multi-head latent attention (DeepSeek-V2/V3), on when kv_lora_rank > 0: keys and values
  // through a shared low-rank latent, queries directly (q_lora_rank 0) or through one too; each
  // head's query and key are a part without position (qk_nope_head_dim) and a rotated part
  // (qk_rope_head_dim, the key's shared by all heads).
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;

  // Whether layer `layer_id` holds a `moe` in place of `feed_forward`.
  bool is_moe_layer(int64_t layer_id) const { return moe.num_experts > 0 && layer_id >= moe.n_dense_layers; }

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : dim / n_heads; }
  bool latent_attention() const { return kv_lora_rank > 0; }
  // The width RoPE rotates per head: head_dim, or latent attention's qk_rope_head_dim.
  int64_t rope_dim() const { return latent_attention() ? qk_rope_head_dim : head_dim(); }
  // Per head, the widths of a query/key and of a value (what attention multiplies, and a KV cache holds).
  int64_t qk_head_dim() const { return latent_attention() ? qk_nope_head_dim + qk_rope_head_dim : head_dim(); }
  int64_t value_head_dim() const { return latent_attention() ? v_head_dim : head_dim(); }
  // Heads a KV cache keeps: the kv heads, or every head under latent attention (which caches
  // each head's expanded key and value).
  int64_t cached_heads() const { return latent_attention() ? n_heads : kv_heads(); }
  int64_t ffn_hidden_dim() const;
};

}  // namespace ctitan::models
