#include "ctitan/distributed/parallel_dims.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"

namespace ctitan::distributed {

ParallelDims ParallelDims::from_config(const config::Parallelism& p, int64_t world_size) {
  ParallelDims d;
  d.world_size = world_size;
  d.dp_replicate = p.data_parallel_replicate_degree;
  d.tp = p.tensor_parallel_degree;
  d.pp = p.pipeline_parallel_degree;
  d.dp_shard = p.data_parallel_shard_degree;
  if (d.dp_shard == -1) d.dp_shard = std::max<int64_t>(1, world_size / (d.pp * d.dp_replicate * d.tp));
  if (d.pp * d.dp_replicate * d.dp_shard * d.tp != world_size) {
    throw ConfigError(fmt::format(
        "parallelism: {}data_parallel_replicate_degree ({}) x data_parallel_shard_degree ({}) x "
        "tensor_parallel_degree ({}) = {} does not equal the world size {}",
        d.pp > 1 ? fmt::format("pipeline_parallel_degree ({}) x ", d.pp) : "", d.dp_replicate,
        p.data_parallel_shard_degree == -1 ? fmt::format("-1 -> {}", d.dp_shard) : std::to_string(d.dp_shard), d.tp,
        d.pp * d.dp_replicate * d.dp_shard * d.tp, world_size));
  }
  return d;
}

std::vector<std::pair<std::string, int64_t>> ParallelDims::mesh_dims() const {
  std::vector<std::pair<std::string, int64_t>> dims;
  for (auto [name, size] : {std::pair<const char*, int64_t>{"pp", pp}, {"dp_replicate", dp_replicate},
                            {"dp_shard", dp_shard}, {"tp", tp}}) {
    if (size > 1) dims.emplace_back(name, size);
  }
  return dims;
}

}  // namespace ctitan::distributed
