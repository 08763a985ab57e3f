#pragma once
// Causal self-attention, by PyTorch's at::scaled_dot_product_attention (is_causal): its flash
// kernel on CPU (blocked over queries and keys, fp32 softmax statistics, no (T, T) matrix kept)
// and its fused kernels on CUDA. ctitan had its own blocked CPU kernel until bench/kernel_bench
// measured SDPA faster at every shape it runs on libtorch 2.15 (forward + backward: 0.61x of
// ours' time at (4, 512, 12, 64), 0.30x at (1, 2048, 16, 16)); it was deleted.
#include <torch/torch.h>

namespace ctitan::ops {

// q, k, v: (B, T, H, D), one dtype (bf16 or fp32; k and v already repeated for GQA).
// Returns softmax(q k^T / sqrt(D) + causal mask) v as (B, T, H * D), in that dtype.
// Autocast does not apply inside: under autocast the projections already produced bf16.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// The same computation written with plain libtorch ops: the reference the tests compare to, and
// the path CTITAN_DISABLE_FUSED=attention selects.
torch::Tensor causal_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

}  // namespace ctitan::ops
