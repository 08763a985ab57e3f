#pragma once
// Sum of squares of many tensors in one read of each, accumulated in double: the core of the
// global gradient norm. The tensor-op version converts, squares into a temporary and sums, per
// parameter.
#include <torch/torch.h>

#include <vector>

namespace ctitan::ops {

// Sum over all defined tensors of sum(x^2); fp32 or bf16 tensors, any layout.
double sum_of_squares(const std::vector<torch::Tensor>& tensors);

}  // namespace ctitan::ops
