#pragma once
// One AdamW update of one parameter in a single pass over memory.
//
// Written with tensor ops, an update is eight kernels and two temporaries (decay, lerp, mul,
// addcmul, sqrt, div, add, addcdiv): about 20 full passes over parameter-sized memory, which for
// the 134M model is ~10 GB per step. This reads param, grad and the two moments once and writes
// param and the moments once.
#include <torch/torch.h>

namespace ctitan::ops {

struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // 1-based count of updates of this parameter, for the bias corrections
};

// param, exp_avg, exp_avg_sq: contiguous fp32 of one size; grad: same size, fp32 or bf16.
// Same arithmetic as torch.optim.AdamW (decoupled decay, then moments, then bias-corrected step).
void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWStep& s);

// The same update by PyTorch's own fused kernel (at::_fused_adamw_, CPU and CUDA): the path for
// CUDA tensors, and the upstream figure bench/kernel_bench compares ours with.
void adamw_update_upstream(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                           torch::Tensor& exp_avg_sq, const AdamWStep& s);

// The same update with tensor ops: the reference the test compares to.
void adamw_update_reference(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                            torch::Tensor& exp_avg_sq, const AdamWStep& s);

}  // namespace ctitan::ops
