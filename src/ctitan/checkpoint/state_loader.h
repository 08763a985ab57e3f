#pragma once
// Loads a checkpoint into a trainer's live state, whatever layout saved it.
//
// Shared parts (model, optimizer, lr_scheduler, train_state) are read into the live tensors in
// place, each rank reading the rows its layout holds. Per-rank parts are replaced:
//   rng:        the saved rank's own state, or saved rank 0's when the rank did not exist.
//   dataloader: with the same dp degree, the state of the saved rank with the same dp rank.
//     With another dp degree, every rank takes the state of the saved rank that read furthest.
//     All ranks read the same stream and window i belongs to dp rank i % degree, so after a step
//     the windows [0, W) are consumed, W being the largest saved window_index; that rank's
//     stream position is exactly after window W - 1. Restarting every new rank there, keeping
//     window numbers, gives each next step the next (new degree x batch) windows: no window is
//     skipped or seen twice, and the global sample order is that of an unchanged run.
#include <map>
#include <set>
#include <string>

#include "ctitan/checkpoint/reader.h"
#include "ctitan/common/state_dict.h"

namespace ctitan::checkpoint {

struct RankPlace {
  int rank = 0, world_size = 1, dp_rank = 0, dp_degree = 1;
};

// Fills `state` (from Trainer::state_dicts(), shards described by `layouts`) from the checkpoint.
// Only `parts` are touched. Throws InputError naming the file or key on any mismatch or corruption.
void load_into(CheckpointReader& reader, std::map<std::string, StateDict>& state,
               const std::map<std::string, ShardLayouts>& layouts, const RankPlace& place,
               const std::set<std::string>& parts);

// The saved rank whose `part` state this rank loads (see above). Exposed for tests.
int source_rank(CheckpointReader& reader, const std::string& part, const RankPlace& place);

}  // namespace ctitan::checkpoint
