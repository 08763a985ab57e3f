#pragma once
// A tp group passed through torch::autograd::Function::apply, whose arguments must be tensors or
// IValue-convertible values: the communicator's address as an int64. The group outlives every
// forward and backward that uses it (TensorParallel's contract), so the address stays valid.
#include <torch/torch.h>

#include <cstdint>

#include "ctitan/distributed/communicator.h"

namespace ctitan::parallel::tp {

inline int64_t group_handle(distributed::Communicator& group) { return reinterpret_cast<int64_t>(&group); }

inline distributed::Communicator& group_from_handle(int64_t handle) {
  return *reinterpret_cast<distributed::Communicator*>(handle);
}

// The group a Function's forward stored under saved_data["group"].
inline distributed::Communicator& group_of(torch::autograd::AutogradContext* ctx) {
  return group_from_handle(ctx->saved_data["group"].toInt());
}

}  // namespace ctitan::parallel::tp
