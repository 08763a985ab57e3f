// `ctitan selftest mesh --shape RxS`: run under `ctitan run` with R*S ranks. Builds the
// [dp_replicate, dp_shard] DeviceMesh with real process groups and checks that every group's
// members, as the ranks themselves report them through an all_gather, are the ranks the mesh's
// coordinates say they are, in group-rank order.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ctitan/cli/commands.h"
#include "ctitan/common/error.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/device_mesh.h"
#include "ctitan/distributed/store.h"

namespace ctitan::cli {

void add_mesh_selftest(CLI::App& selftest) {
  auto shape = std::make_shared<std::string>("2x2");
  auto* mesh_cmd = selftest.add_subcommand("mesh", "Check DeviceMesh group membership with real groups");
  mesh_cmd->add_option("--shape", *shape, "dp_replicate x dp_shard, e.g. 2x2 or 1x4");
  mesh_cmd->callback([shape] {
    int64_t replicate = 0, shard = 0;
    if (std::sscanf(shape->c_str(), "%ldx%ld", &replicate, &shard) != 2 || replicate < 1 || shard < 1) {
      throw InputError(fmt::format("selftest mesh: --shape must be RxS (got '{}')", *shape), 2);
    }
    auto env = distributed::read_dist_env();
    if (replicate * shard != env.world_size) {
      throw InputError(fmt::format("selftest mesh: shape {} needs {} ranks, got {}", *shape, replicate * shard,
                                   env.world_size), 2);
    }
    auto store = distributed::connect_store(env, std::chrono::seconds(60));
    distributed::DeviceMesh mesh({"dp_replicate", "dp_shard"}, {replicate, shard}, env.rank);
    mesh.flatten({"dp_replicate", "dp_shard"}, "dp");
    mesh.create_groups(store, std::chrono::seconds(60));
    for (const std::string dim : {"dp_replicate", "dp_shard", "dp"}) {
      auto group = mesh.group(dim);
      auto expected = mesh.group_ranks(dim);
      // Each member contributes its own global rank; the gathered vector is the real membership.
      auto mine = torch::tensor({int64_t(env.rank)}, torch::kLong);
      auto gathered = torch::empty({group->size()}, torch::kLong);
      group->all_gather_into_tensor(gathered, mine);
      std::vector<int64_t> actual(gathered.data_ptr<int64_t>(), gathered.data_ptr<int64_t>() + gathered.numel());
      if (actual != expected || group->rank() != mesh.local_rank(dim)) {
        throw InputError(fmt::format("selftest mesh: rank {} group '{}' has members [{}] (group rank {}), mesh "
                                     "coordinates say [{}] (group rank {})", env.rank, dim, fmt::join(actual, ","),
                                     group->rank(), fmt::join(expected, ","), mesh.local_rank(dim)));
      }
      fmt::print("rank {} coordinate ({}) {}: [{}]\n", env.rank, fmt::join(mesh.coordinate(), ","), dim,
                 fmt::join(actual, ","));
    }
    mesh.group("dp")->barrier();
  });
}

}  // namespace ctitan::cli
