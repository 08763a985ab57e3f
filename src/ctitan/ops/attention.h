#pragma once
// Causal self-attention, by PyTorch's at::scaled_dot_product_attention (is_causal): its flash
// kernel on CPU (blocked over queries and keys, fp32 softmax statistics, no (T, T) matrix kept)
// and its fused kernels on CUDA. Upstream's op, because bench/kernel_bench measured it faster than
// a ctitan kernel at every shape it runs.
#include <torch/torch.h>

namespace ctitan::ops {

// q: (B, T, H, D) at positions [q_start, q_start + T); k: (B, S, H, D), v: (B, S, H, Dv) at
// positions [0, S), S = q_start + T (q_start > 0 when earlier keys come from a KV cache). One
// dtype (bf16 or fp32; k and v already repeated for GQA). Returns softmax(q k^T / sqrt(D) + causal
// mask) v as (B, T, H * Dv), in that dtype: the query at position p sees the keys at positions
// <= p. Dv differs from D under latent attention.
// Autocast does not apply inside: under autocast the projections already produced bf16.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               int64_t q_start = 0);

// The same computation written with plain libtorch ops: the reference the tests compare to, and
// the path CTITAN_DISABLE_FUSED=attention selects.
torch::Tensor causal_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         int64_t q_start = 0);

}  // namespace ctitan::ops
