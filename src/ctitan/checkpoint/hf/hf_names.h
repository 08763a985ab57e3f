#pragma once
// torchtitan parameter names <-> Hugging Face names (LlamaForCausalLM, Qwen3ForCausalLM and
// Qwen3MoeForCausalLM share them; Qwen3 adds the QK-norms, Qwen3-MoE the router and experts),
// and the q/k row order that HF's rotary convention needs.
#include <torch/torch.h>

#include <optional>
#include <string>

#include "ctitan/models/common/model_args.h"

namespace ctitan::checkpoint::hf {

// `layers.3.attention.wq.weight` -> `model.layers.3.self_attn.q_proj.weight`, etc. Throws
// InputError for a name that is not a decoder parameter.
// `latent_attention`: the model's attention is DeepSeek's (its own HF names, and the experts'
// selection bias as mlp.gate.e_score_correction_bias).
std::string to_hf_name(const std::string& fqn, bool latent_attention = false);
// The exact inverse of to_hf_name. Throws InputError naming `source` for an unknown name.
std::string from_hf_name(const std::string& hf_name, const std::string& source, bool latent_attention = false);

// HF stores each routed expert apart (`model.layers.3.mlp.experts.5.gate_proj.weight`), torchtitan
// stacks them (`layers.3.moe.experts.w1`, expert 5 its row 5; up_proj is w3, down_proj w2).
struct ExpertRow {
  std::string fqn;     // the stacked parameter
  int64_t expert = 0;  // its row
};
// The stacked row an HF expert weight is; nullopt for any other name.
std::optional<ExpertRow> expert_row_from_hf(const std::string& hf_name);
// Whether `fqn` is a stacked experts parameter, and the HF name of its row `expert`.
bool is_stacked_experts(const std::string& fqn);
std::string expert_hf_name(const std::string& fqn, int64_t expert);

// Meta/torchtitan rotate adjacent pairs (2i, 2i+1) of each head; HF rotates (i, i + head_dim/2).
// Reordering the output rows of wq/wk per head makes HF's rotation compute what ours does.
// w: (n_heads * head_dim, dim), with n_heads the heads of that projection (kv heads for wk).
torch::Tensor permute_rows_to_hf(const torch::Tensor& w, int64_t n_heads);
torch::Tensor permute_rows_from_hf(const torch::Tensor& w, int64_t n_heads);

// QK-norm weights, (head_dim): the same reordering within one head, since the norm scales each
// query/key element before the rotation reads it.
torch::Tensor permute_head_norm_to_hf(const torch::Tensor& w);
torch::Tensor permute_head_norm_from_hf(const torch::Tensor& w);

// Parameter `fqn` of a model with `args` in HF's layout (q/k rows and QK-norms reordered; every
// other tensor as it is), and back.
torch::Tensor to_hf_layout(const std::string& fqn, const torch::Tensor& t, const models::ModelArgs& args);
torch::Tensor from_hf_layout(const std::string& fqn, const torch::Tensor& t, const models::ModelArgs& args);

}  // namespace ctitan::checkpoint::hf
