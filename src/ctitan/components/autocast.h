#pragma once
// bf16 autocast scope, the C++ counterpart of `torch.autocast(device_type, torch.bfloat16)`, for
// the device the model's tensors live on (CPU here; CUDA compiled, never run on a GPU). Matmuls
// run in bf16; the fp32 master weights are untouched.
#include <ATen/autocast_mode.h>

namespace ctitan::components {

class AutocastGuard {
 public:
  AutocastGuard(bool enabled, c10::DeviceType device) : enabled_(enabled), device_(device) {
    if (!enabled_) return;
    previous_ = at::autocast::is_autocast_enabled(device_);
    previous_dtype_ = at::autocast::get_autocast_dtype(device_);
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    // The cast cache holds bf16 copies of the weights; it must not outlive the forward that
    // filled it, or the next step would compute with stale weights.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, previous_);
    at::autocast::set_autocast_dtype(device_, previous_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  c10::DeviceType device_;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

}  // namespace ctitan::components
