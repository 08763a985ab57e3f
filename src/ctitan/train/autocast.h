#pragma once
// bf16 autocast scope for CPU, the C++ counterpart of `torch.autocast("cpu", torch.bfloat16)`.
// Matmuls run in bf16 (AMX); the fp32 master weights are untouched.
#include <ATen/autocast_mode.h>

namespace ctitan::train {

class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    previous_ = at::autocast::is_cpu_enabled();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    // The cast cache holds bf16 copies of the weights; it must not outlive the forward that
    // filled it, or the next step would compute with stale weights.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(previous_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  bool previous_ = false;
};

}  // namespace ctitan::train
