#pragma once
// One AdamW update of one parameter.
//
// The update is PyTorch's own fused kernel (at::_fused_adamw_, CPU and CUDA): one pass over
// param, grad and both moments. ctitan had its own CPU loop until bench/kernel_bench measured
// upstream's 6.6x faster on libtorch 2.15 (57 ms against 382 ms for 134M fp32 parameters); it
// was deleted. The tensor-op formulation stays as the reference the tests compare with, and as
// the path CTITAN_DISABLE_FUSED=adamw selects.
#include <torch/torch.h>

namespace ctitan::ops {

struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // 1-based count of updates of this parameter, for the bias corrections
};

// param, exp_avg, exp_avg_sq: fp32 of one size; grad: same size, any float dtype.
// Same arithmetic as torch.optim.AdamW (decoupled decay, then moments, then bias-corrected step).
void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWStep& s);

// The same update with tensor ops: the reference the test compares to.
void adamw_update_reference(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                            torch::Tensor& exp_avg_sq, const AdamWStep& s);

}  // namespace ctitan::ops
