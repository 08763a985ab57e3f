#pragma once
// Causal self-attention, blocked over queries, as one autograd Function.
//
// The plain formulation materialises (B, H, T, T) scores several times over (scores, masked
// scores, fp32 softmax, probabilities, and as many again in backward): at T = 2048 that is
// hundreds of MB of memory traffic per layer, which is where the time went. Here each block of
// queries meets only the keys it can see (causal blocks are skipped), the softmax is one fused
// pass in fp32 that keeps the per-row log-sum-exp, and backward recomputes the probabilities
// block by block from it instead of storing them. The matmuls run in the inputs' dtype (bf16 uses
// oneDNN/AMX, exactly like the unfused path under autocast); softmax and all accumulations are
// fp32.
#include <torch/torch.h>

namespace ctitan::ops {

// q, k, v: (B, T, H, D), one dtype (bf16 or fp32; k and v already repeated for GQA).
// Returns softmax(q k^T / sqrt(D) + causal mask) v as (B, T, H * D), in that dtype.
// Autocast does not apply inside: under autocast the projections already produced bf16.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// The same computation by PyTorch's at::scaled_dot_product_attention (is_causal): the path for
// CUDA tensors, and the upstream figure bench/kernel_bench compares ours with on CPU.
torch::Tensor causal_attention_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// The same computation written with plain libtorch ops: the reference the tests compare to.
torch::Tensor causal_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

}  // namespace ctitan::ops
