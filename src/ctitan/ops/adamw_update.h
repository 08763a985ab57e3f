#pragma once
// AdamW updates: of one parameter, or of many in one call per (device, dtype).
//
// The update is PyTorch's own fused kernel (at::_fused_adamw_, CPU and CUDA): one pass over
// param, grad and both moments. Upstream's op, because bench/kernel_bench measured it faster than
// a ctitan loop. The tensor-op formulation stays as the reference the tests compare with, and as
// the path CTITAN_DISABLE_FUSED=adamw selects.
#include <torch/torch.h>

#include <vector>

namespace ctitan::ops {

struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // 1-based count of updates of this parameter, for the bias corrections
};

// param, exp_avg, exp_avg_sq: fp32 of one size; grad: same size, any float dtype.
// Same arithmetic as torch.optim.AdamW (decoupled decay, then moments, then bias-corrected step).
void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWStep& s);

// One parameter of a multi-tensor update: the tensors as for adamw_update, and its own step count.
struct AdamWParam {
  torch::Tensor param, grad, exp_avg, exp_avg_sq;
  int64_t step;  // 1-based, this update included
};

// The update of every parameter in `params`, with one _fused_adamw_ call per (device, dtype) group
// as torch.optim.AdamW(fused=True) makes: on CUDA one multi-tensor kernel launch per group
// instead of one per parameter. `s.step` is ignored; each parameter's own count is used.
void adamw_update_many(const std::vector<AdamWParam>& params, const AdamWStep& s);

// The same update with tensor ops: the reference the test compares to.
void adamw_update_reference(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                            torch::Tensor& exp_avg_sq, const AdamWStep& s);

}  // namespace ctitan::ops
