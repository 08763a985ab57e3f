#pragma once
// What `ctitan ps` accepts from the job config and the launcher, checked before anything starts,
// and the names its processes go by.
#include <string>

#include "ctitan/config/job_config.h"

namespace ctitan::ps {

// Rank 0 is the server; ranks 1..world_size-1 are trainers.
struct PsLayout {
  int rank = 0;
  int world_size = 1;
  int trainers() const { return world_size - 1; }
  bool is_server() const { return rank == 0; }
};

// One ConfigError line naming the key for: a world of fewer than 2 processes,
// ps.batch_size other than -1 or the trainer count, the training features ps does not run
// (parallelism degrees, pipeline, a seed checkpoint, activation checkpointing, profiling,
// gradient accumulation that does not divide).
PsLayout validate_ps_config(const config::JobConfig& config, int rank, int world_size);

// RPC worker names: "ps" and "trainer<rank>".
std::string server_name();
std::string trainer_name(int rank);

// Microbatches of local_batch_size a trainer accumulates per step: global_batch_size /
// (local_batch_size * trainers), or 1 when global_batch_size is -1.
int64_t microbatches_per_step(const config::JobConfig& config, int trainers);

}  // namespace ctitan::ps
