#pragma once
// RMSNorm as one autograd Function: one read of x for the row's mean square and one pass for
// the output, fp32 math whatever the storage dtype. The tensor-op version (convert, square,
// mean, rsqrt, multiply, convert, multiply) makes about seven passes forward and more backward.
#include <torch/torch.h>

namespace ctitan::ops {

// x: (..., dim) fp32 or bf16; weight: (dim) fp32 or bf16. Returns
// (x * rsqrt(mean(x^2) + eps)).to(x.dtype) * weight.to(x.dtype), in x's dtype, or in autocast's
// dtype when autocast is on and x is fp32 (the same product, rounded once); each gradient in its
// input's dtype.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// The tensor-op formulation (the model's original one): the reference the tests compare to.
torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace ctitan::ops
