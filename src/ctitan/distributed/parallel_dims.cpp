#include "ctitan/distributed/parallel_dims.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"

namespace ctitan::distributed {

ParallelDims ParallelDims::from_config(const config::Parallelism& p, int64_t world_size) {
  ParallelDims d;
  d.world_size = world_size;
  d.dp_replicate = p.data_parallel_replicate_degree;
  d.tp = p.tensor_parallel_degree;
  d.cp = p.context_parallel_degree;
  d.pp = p.pipeline_parallel_degree;
  d.dp_shard = p.data_parallel_shard_degree;
  // Degrees near 2^63 would overflow the product (to 0: a division by zero below): a product
  // beyond the world size can never match it, so say so without computing it.
  auto product = [](std::initializer_list<int64_t> degrees) {
    int64_t total = 1;
    for (int64_t degree : degrees) {
      if (degree < 1 || __builtin_mul_overflow(total, degree, &total)) return int64_t(-1);
    }
    return total;
  };
  const int64_t fixed = product({d.pp, d.dp_replicate, d.cp, d.tp});
  if (fixed < 1 || (d.dp_shard != -1 && product({fixed, d.dp_shard}) < 1)) {
    throw ConfigError(fmt::format(
        "parallelism: pipeline_parallel_degree ({}) x data_parallel_replicate_degree ({}) x "
        "data_parallel_shard_degree ({}) x context_parallel_degree ({}) x tensor_parallel_degree ({}) is not a "
        "product of positive degrees that fits the world size {}",
        d.pp, d.dp_replicate, d.dp_shard, d.cp, d.tp, world_size));
  }
  if (d.dp_shard == -1) d.dp_shard = std::max<int64_t>(1, world_size / fixed);
  if (d.pp * d.dp_replicate * d.dp_shard * d.cp * d.tp != world_size) {
    throw ConfigError(fmt::format(
        "parallelism: {}data_parallel_replicate_degree ({}) x data_parallel_shard_degree ({}) x {}"
        "tensor_parallel_degree ({}) = {} does not equal the world size {}",
        d.pp > 1 ? fmt::format("pipeline_parallel_degree ({}) x ", d.pp) : "", d.dp_replicate,
        p.data_parallel_shard_degree == -1 ? fmt::format("-1 -> {}", d.dp_shard) : std::to_string(d.dp_shard),
        d.cp > 1 ? fmt::format("context_parallel_degree ({}) x ", d.cp) : "", d.tp,
        d.pp * d.dp_replicate * d.dp_shard * d.cp * d.tp, world_size));
  }
  d.ep = p.expert_parallel_degree;
  if (d.ep > 1 && d.dp_shard % d.ep != 0) {
    throw ConfigError(fmt::format("parallelism.expert_parallel_degree {} does not divide data_parallel_shard_degree {}: "
                                  "expert parallelism takes its ranks from dp_shard", d.ep, d.dp_shard));
  }
  if (d.ep > 1 && d.cp > 1) {
    throw ConfigError(fmt::format("parallelism.expert_parallel_degree {} with context_parallel_degree {}: expert "
                                  "parallelism over cp ranks is not built; use one of them", d.ep, d.cp));
  }
  return d;
}

std::vector<std::pair<std::string, int64_t>> ParallelDims::mesh_dims() const {
  std::vector<std::pair<std::string, int64_t>> dims;
  for (auto [name, size] : {std::pair<const char*, int64_t>{"pp", pp}, {"dp_replicate", dp_replicate},
                            {"dp_shard", dp_shard}, {"cp", cp}, {"tp", tp}}) {
    if (size <= 1) continue;
    if (std::string(name) == "dp_shard" && ep > 1) {
      // dp_shard's ranks as efsdp x ep: an ep group holds adjacent dp_shard ranks (torchtitan's
      // order); the flattened dp_shard (init_distributed) is FSDP's group for the rest.
      dims.emplace_back("efsdp", dp_shard / ep);
      dims.emplace_back("ep", ep);
      continue;
    }
    dims.emplace_back(name, size);
  }
  return dims;
}

}  // namespace ctitan::distributed
