#pragma once
// torchtitan parameter names <-> Hugging Face names (LlamaForCausalLM and Qwen3ForCausalLM share
// them; Qwen3 adds the QK-norms), and the q/k row order that HF's rotary convention needs.
#include <torch/torch.h>

#include <string>

#include "ctitan/models/common/model_args.h"

namespace ctitan::checkpoint::hf {

// `layers.3.attention.wq.weight` -> `model.layers.3.self_attn.q_proj.weight`, etc. Throws
// InputError for a name that is not a decoder parameter.
std::string to_hf_name(const std::string& fqn);
// The exact inverse of to_hf_name. Throws InputError naming `source` for an unknown name.
std::string from_hf_name(const std::string& hf_name, const std::string& source);

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
