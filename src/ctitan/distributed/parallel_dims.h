#pragma once
// The parallel degrees of a job, resolved against the world size, as torchtitan's ParallelDims.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/config/job_config.h"

namespace ctitan::distributed {

struct ParallelDims {
  int64_t dp_replicate = 1;
  int64_t dp_shard = 1;
  int64_t cp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  // Expert parallelism: MoE experts split over `ep` of dp_shard's ranks (the mesh splits dp_shard
  // into efsdp x ep; FSDP shards the experts over efsdp, everything else over dp_shard).
  int64_t ep = 1;
  int64_t world_size = 1;

  // Resolves data_parallel_shard_degree = -1 to the ranks left over. A product that does not
  // equal the world size is a ConfigError naming every degree and the world size.
  static ParallelDims from_config(const config::Parallelism& p, int64_t world_size);

  int64_t dp() const { return dp_replicate * dp_shard; }
  bool ddp_enabled() const { return dp_replicate > 1 && !fsdp_enabled(); }
  // FSDP shards over dp_shard x cp, as torchtitan's dp_shard_cp: context parallelism's ranks hold
  // the same parameters and compute gradients of different tokens, which FSDP's reduce-scatter sums.
  bool fsdp_enabled() const { return dp_shard * cp > 1; }
  bool cp_enabled() const { return cp > 1; }
  bool tp_enabled() const { return tp > 1; }
  bool pp_enabled() const { return pp > 1; }
  bool ep_enabled() const { return ep > 1; }

  // The mesh's named dimensions, outermost first, sizes > 1 only (torchtitan's order:
  // pp, dp_replicate, dp_shard, cp, tp), except that expert parallelism splits dp_shard into
  // efsdp (kept at size 1 too: FSDP's group for the experts) x ep.
  std::vector<std::pair<std::string, int64_t>> mesh_dims() const;
};

}  // namespace ctitan::distributed
