#pragma once
// The model's parameters (or their gradients) as one flat fp32 tensor, the unit a trainer pushes
// and the server hands back: one tensor per RPC instead of one per parameter.
#include <torch/torch.h>

#include <vector>

namespace ctitan::ps {

// (sum of numel,) fp32, the tensors one after another in the given order (the model's
// named_parameters order on every process, so offsets agree without being sent).
torch::Tensor flatten(const std::vector<torch::Tensor>& tensors);

// The parameters' gradients, flattened as flatten(params); an undefined gradient counts as zeros.
torch::Tensor flatten_grads(const std::vector<torch::Tensor>& params);

// Copies `flat` (sum of numel,) back into `tensors`, in place. An InputError naming `from` if the
// element count differs: the server and this process did not build the same model.
void unflatten_into(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors, const std::string& from);

// Sets each parameter's .grad to its slice of `flat` (views: no copy).
void assign_grads(const torch::Tensor& flat, const std::vector<torch::Tensor>& params);

int64_t total_numel(const std::vector<torch::Tensor>& tensors);

}  // namespace ctitan::ps
