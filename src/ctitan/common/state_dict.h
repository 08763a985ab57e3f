#pragma once
// Every stateful part of training (model, optimizer, LR scheduler, dataloader, RNG, train
// state) gives and takes its state as named tensors. Scalars are 0-d tensors, so one format
// serves checkpoints of all of them.
#include <torch/torch.h>

#include <map>
#include <string>

namespace ctitan {

using StateDict = std::map<std::string, torch::Tensor>;

inline torch::Tensor scalar_state(int64_t v) { return torch::tensor(v, torch::kLong); }
inline torch::Tensor scalar_state(double v) { return torch::tensor(v, torch::kDouble); }

// Looks up `key`; a missing entry is an InputError naming it, not a c10 crash.
const torch::Tensor& require_state(const StateDict& state, const std::string& key);

}  // namespace ctitan
