#pragma once
// What each rank writes. Every rank lists the slices it holds; a slice held by several ranks
// (a DDP replica's whole tensor, an HSDP replica's shard) is written once, by the lowest rank
// holding it, so the set of files is the same whatever the replication degree.
#include <map>
#include <string>
#include <vector>

#include "ctitan/common/state_dict.h"

namespace ctitan::checkpoint {

// dataloader and rng differ per rank and are saved for every rank; every other part is shared.
bool is_per_rank_part(const std::string& part);

// One tensor this rank holds: the box at `offsets` (one per dimension) with the tensor's shape,
// inside a tensor of shape global_shape (whole tensors: offsets all 0, shape == global_shape).
struct LocalSlice {
  std::string part, key;
  int rank = -1;  // the owner for per-rank parts; -1 for shared parts
  torch::Tensor tensor;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
};

std::vector<LocalSlice> local_slices(const std::map<std::string, StateDict>& state,
                                     const std::map<std::string, ShardLayouts>& layouts, int rank);

// What makes two ranks' slices the same bytes: part, key, owner, and box.
std::string slice_identity(const LocalSlice& s);
// The plan a rank sends to the others: its slice identities, one per line.
std::string plan_text(const std::vector<LocalSlice>& slices);
// Given every rank's plan_text (by rank), keeps the slices `rank` must write: those no lower
// rank holds.
std::vector<LocalSlice> slices_to_write(const std::vector<std::string>& plans, int rank,
                                        std::vector<LocalSlice> mine);

}  // namespace ctitan::checkpoint
