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

// Where this rank's tensor sits inside the global tensor it is part of: the box that starts at
// `offsets` (one per dimension; missing trailing ones are 0) and has the local tensor's shape,
// inside a tensor of shape global_shape, without padding. FSDP shards on dim 0 (FSDP2's
// Shard(0)): offsets {row_offset}. Tensor parallelism shards a weight's rows (column-wise
// linears, vocab-sharded embeddings) or columns (row-wise linears), and FSDP then shards the
// TP-local tensor's rows: offsets {row, column}. A rank may hold zero rows. A tensor with no
// layout entry is whole, the same on every rank.
struct ShardLayout {
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
  int64_t offset(size_t dim) const { return dim < offsets.size() ? offsets[dim] : 0; }
  // offsets padded with zeros to one per dimension of global_shape.
  std::vector<int64_t> full_offsets() const {
    std::vector<int64_t> out(global_shape.size(), 0);
    for (size_t d = 0; d < out.size(); ++d) out[d] = offset(d);
    return out;
  }
};
using ShardLayouts = std::map<std::string, ShardLayout>;  // by state-dict key

// Looks up `key`; a missing entry is an InputError naming it, not a c10 crash.
const torch::Tensor& require_state(const StateDict& state, const std::string& key);

}  // namespace ctitan
