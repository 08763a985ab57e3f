#pragma once
// Every stateful part of training (model, optimizer, LR scheduler, dataloader, RNG, train
// state) gives and takes its state as named tensors. Scalars are 0-d tensors, so one format
// serves checkpoints of all of them.
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace ctitan {

using StateDict = std::map<std::string, torch::Tensor>;

inline torch::Tensor scalar_state(int64_t v) { return torch::tensor(v, torch::kLong); }
inline torch::Tensor scalar_state(double v) { return torch::tensor(v, torch::kDouble); }

// Where this rank's tensor sits inside the global tensor it is part of. FSDP shards every
// parameter, and its optimizer state, on dim 0 (as FSDP2's Shard(0)): this rank holds rows
// [row_offset, row_offset + local.size(0)) of a tensor of shape global_shape, without padding.
// A rank may hold zero rows. A tensor with no layout entry is whole, the same on every rank of
// its data-parallel group.
struct ShardLayout {
  std::vector<int64_t> global_shape;
  int64_t row_offset = 0;
};
using ShardLayouts = std::map<std::string, ShardLayout>;  // by state-dict key

// Looks up `key`; a missing entry is an InputError naming it, not a c10 crash.
const torch::Tensor& require_state(const StateDict& state, const std::string& key);

}  // namespace ctitan
