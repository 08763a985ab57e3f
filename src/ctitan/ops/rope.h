#pragma once
// Rotary position embedding as one autograd Function: each adjacent pair (2i, 2i+1) of a head
// is rotated by the angle of (position, i) in one pass, fp32 math; backward rotates back. The
// tensor-op version converts to fp32, splits, multiplies, stacks and converts back.
#include <torch/torch.h>

namespace ctitan::ops {

// x: (B, T, H, D) fp32 or bf16; cos, sin: (>= T, D/2) fp32 tables. Returns x rotated, in x's
// dtype. The tables get no gradient.
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// The tensor-op formulation (the model's original one): the reference the tests compare to.
torch::Tensor rope_reference(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace ctitan::ops
