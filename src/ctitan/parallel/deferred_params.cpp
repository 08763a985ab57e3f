#include "ctitan/parallel/deferred_params.h"

#include "ctitan/models/common/deferred_init.h"
#include "ctitan/parallel/fsdp/storage.h"

namespace ctitan::parallel {

torch::Tensor deferred_tensor(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  auto t = torch::empty(sizes, options);  // its memory at once given back: the peak of one tensor
  fsdp::free_storage(t);
  return t;
}

void move_deferred(torch::nn::Module& module, torch::Device device) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (!models::is_deferred(p) || p.device() == device) continue;
    p.set_data(deferred_tensor(p.sizes(), p.options().device(device)));
  }
  // Buffers (a MoE layer's expert_bias) are built with their values, and are small: moved whole.
  for (auto& b : module.buffers()) {
    if (b.device() != device) b.set_data(b.to(device));
  }
}

}  // namespace ctitan::parallel
