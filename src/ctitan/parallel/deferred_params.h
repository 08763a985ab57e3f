#pragma once
// Parameters built without their values (models/common/deferred_init.h) moved to the rank's
// device without values either.
#include <torch/torch.h>

namespace ctitan::parallel {

// A tensor of `sizes` with `options`, without storage: a deferred parameter's part.
torch::Tensor deferred_tensor(at::IntArrayRef sizes, const torch::TensorOptions& options);

// Every deferred parameter of `module` (recursively) not on `device` becomes a tensor of the same
// shape and dtype there, still without storage; parameters with values are left alone. Buffers
// move with their values.
void move_deferred(torch::nn::Module& module, torch::Device device);

}  // namespace ctitan::parallel
