#pragma once
// Run-time switch back to the plain tensor-op formulations, for before/after measurements in one
// build and for bisecting a numerical question: CTITAN_DISABLE_FUSED=attention,rms_norm (or
// "all"). Names: attention, rms_norm, rope, swiglu, cross_entropy, adamw, grad_norm, grouped_mm.
#include <ATen/ATen.h>

#include <string>

namespace ctitan::ops {

// False when CTITAN_DISABLE_FUSED (read once) lists `op` or "all".
bool fused_enabled(const std::string& op);

// Whether `op` takes the fused kernel for `t`: the kernels are CPU loops, so tensors on any
// other device (CUDA) take the tensor-op path, or upstream's fused op where one exists.
inline bool fused_for(const std::string& op, const at::Tensor& t) { return t.is_cpu() && fused_enabled(op); }

}  // namespace ctitan::ops
