#pragma once
// One parameter under FSDP: its dim-0 shard on this rank, and where that shard sits in the
// group's flat buffer. Sharding follows FSDP2's Shard(0): with N ranks and d0 rows, each rank
// owns ceil(d0 / N) rows of a zero-padded tensor; the padding rows exist only in the flat
// buffers and never in the tensors the optimizer, clipping or a checkpoint see.
//
//   d0 = 10 rows, N = 4: padded_rows 3, ranks hold rows [0,3) [3,6) [6,9) [9,10) (+2 padding).
#include <torch/torch.h>

#include <string>
#include <vector>

namespace ctitan::parallel::fsdp {

struct ShardedParam {
  std::string fqn;                    // e.g. layers.3.attention.wq.weight
  torch::Tensor module_param;         // the module's own tensor: shares `unsharded`'s storage
  torch::Tensor unsharded;            // global shape, param_dtype; storage allocated only while gathered
  std::vector<int64_t> global_shape;  // the unsharded shape
  int64_t rows = 0;                   // global_shape[0]
  int64_t row_numel = 0;              // elements per row
  int64_t padded_rows = 0;            // rows per rank after padding: ceil(rows / N)
  int64_t local_rows = 0;             // rows of real data on this rank (0 .. padded_rows)
  int64_t row_offset = 0;             // first global row on this rank
  int64_t flat_offset = 0;            // start of this param's padded shard inside the group's flat shard
  torch::Tensor sharded;              // (local_rows, ...) fp32 leaf, a view into the group's flat shard

  int64_t padded_shard_numel() const { return padded_rows * row_numel; }
  // Real rows of `rank`'s shard (the last ranks may hold fewer, or none).
  int64_t rows_on(int64_t rank) const { return std::clamp<int64_t>(rows - rank * padded_rows, 0, padded_rows); }
  std::vector<int64_t> local_shape() const {
    auto shape = global_shape;
    shape[0] = local_rows;
    return shape;
  }
};

}  // namespace ctitan::parallel::fsdp
