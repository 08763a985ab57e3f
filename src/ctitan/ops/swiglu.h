#pragma once
// The SwiGLU gate silu(a) * b as one autograd Function: one pass forward, one backward, fp32
// math. The tensor-op version writes silu(a), then the product, and backward goes through
// sigmoid, several multiplies and their temporaries.
#include <torch/torch.h>

namespace ctitan::ops {

// a, b: same shape and dtype (fp32 or bf16). Returns silu(a) * b in that dtype. fp32 takes the
// kernel; bf16 takes the tensor ops, which are faster there (swiglu.cpp says where measured).
torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b);

// torch::silu(a) * b: the reference the tests compare to.
torch::Tensor swiglu_reference(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace ctitan::ops
