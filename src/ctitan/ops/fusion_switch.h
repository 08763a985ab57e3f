#pragma once
// Run-time switch back to the plain tensor-op formulations, for before/after measurements in one
// build and for bisecting a numerical question: CTITAN_DISABLE_FUSED=attention,rms_norm (or
// "all"). Names: attention, rms_norm, rope, swiglu, cross_entropy, adamw, grad_norm.
#include <string>

namespace ctitan::ops {

// False when CTITAN_DISABLE_FUSED (read once) lists `op` or "all".
bool fused_enabled(const std::string& op);

}  // namespace ctitan::ops
