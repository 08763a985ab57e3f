#pragma once
// One matmul per group of contiguous rows, each with its own weight: the experts of a mixture of
// experts after their tokens are sorted by expert.
#include <torch/torch.h>

#include <vector>

namespace ctitan::ops {

// x: (N, in), rows grouped by expert; w: (E, out, in), Linear's layout per expert; counts: E
// group sizes summing to N -> (N, out), group e's rows times w[e]^T.
//
// On CUDA this is at::_grouped_mm (one launch, offsets on the device; untested here, no GPU).
// On the CPU, one matmul per non-empty group: _grouped_mm's CPU backward refuses an expanded
// gradient, and which of the two is faster in ctitan's step is not measured in the repo (PyTorch's
// baseline in bench/moe.py runs both ways: docs/PERFORMANCE.md). CTITAN_DISABLE_FUSED=grouped_mm
// takes the per-group path on any device.
torch::Tensor grouped_matmul(const torch::Tensor& x, const torch::Tensor& w, const std::vector<int64_t>& counts);

// at::_grouped_mm alone, for the tests' comparison on the CPU.
torch::Tensor grouped_matmul_fused(const torch::Tensor& x, const torch::Tensor& w, const std::vector<int64_t>& counts);

}  // namespace ctitan::ops
