#include "ctitan/distributed/device_mesh.h"

#include <gtest/gtest.h>

#include <map>

#include "ctitan/common/error.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/parallel_dims.h"
#include "support/test_support.h"
#include "support/thread_ranks.h"

namespace ctitan::distributed {
namespace {

using Ranks = std::vector<int64_t>;

// 2x2 [dp_replicate, dp_shard], row-major: rank = 2 * replicate + shard.
//   shard groups (same replicate coordinate): {0,1}, {2,3}; replicate groups: {0,2}, {1,3}.
TEST(DeviceMesh, GroupsOfA2x2Mesh) {
  for (int64_t r = 0; r < 4; ++r) {
    DeviceMesh mesh({"dp_replicate", "dp_shard"}, {2, 2}, r);
    EXPECT_EQ(mesh.coordinate(), (Ranks{r / 2, r % 2}));
    EXPECT_EQ(mesh.group_ranks("dp_shard"), r < 2 ? (Ranks{0, 1}) : (Ranks{2, 3}));
    EXPECT_EQ(mesh.group_ranks("dp_replicate"), r % 2 == 0 ? (Ranks{0, 2}) : (Ranks{1, 3}));
    EXPECT_EQ(mesh.local_rank("dp_shard"), r % 2);
    EXPECT_EQ(mesh.local_rank("dp_replicate"), r / 2);
    mesh.flatten({"dp_replicate", "dp_shard"}, "dp");
    EXPECT_EQ(mesh.group_ranks("dp"), (Ranks{0, 1, 2, 3}));
    EXPECT_EQ(mesh.size("dp"), 4);
    EXPECT_EQ(mesh.local_rank("dp"), r);
  }
}

TEST(DeviceMesh, GroupsOfA1x4Mesh) {
  for (int64_t r = 0; r < 4; ++r) {
    DeviceMesh mesh({"dp_replicate", "dp_shard"}, {1, 4}, r);
    EXPECT_EQ(mesh.group_ranks("dp_shard"), (Ranks{0, 1, 2, 3}));
    EXPECT_EQ(mesh.group_ranks("dp_replicate"), (Ranks{r}));
    EXPECT_EQ(mesh.local_rank("dp_shard"), r);
  }
}

TEST(DeviceMesh, ThreeDimensionsAndUnknownNames) {
  DeviceMesh mesh({"dp_replicate", "dp_shard", "tp"}, {2, 2, 2}, 5);  // coordinate (1, 0, 1)
  EXPECT_EQ(mesh.coordinate(), (Ranks{1, 0, 1}));
  EXPECT_EQ(mesh.group_ranks("tp"), (Ranks{4, 5}));
  EXPECT_EQ(mesh.group_ranks("dp_shard"), (Ranks{5, 7}));
  EXPECT_EQ(mesh.group_ranks("dp_replicate"), (Ranks{1, 5}));
  EXPECT_THROW(mesh.group_ranks("pp"), std::logic_error);  // a bug in the caller, not user input
}

TEST(ParallelDims, ResolvesTheRestAndNamesTheDegreesOnMismatch) {
  config::Parallelism p;
  auto d = ParallelDims::from_config(p, 4);
  EXPECT_EQ(d.dp_shard, 4);
  EXPECT_TRUE(d.fsdp_enabled());
  p.data_parallel_replicate_degree = 2;
  p.data_parallel_shard_degree = 1;
  d = ParallelDims::from_config(p, 2);
  EXPECT_TRUE(d.ddp_enabled());
  EXPECT_EQ(d.mesh_dims().size(), 1u);
  p.data_parallel_replicate_degree = 3;
  try {
    ParallelDims::from_config(p, 4);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data_parallel_replicate_degree (3)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("world size 4"), std::string::npos) << e.what();
  }
}

// torchtitan's CP: a cp dimension between dp_shard and tp, dp_shard = -1 takes what cp leaves,
// and FSDP shards over dp_shard x cp even where dp_shard is 1 (HSDP when replicated).
TEST(ParallelDims, ContextParallelSitsBetweenDpShardAndTpAndShardsWithFsdp) {
  config::Parallelism p;
  p.context_parallel_degree = 2;
  p.tensor_parallel_degree = 2;
  auto d = ParallelDims::from_config(p, 8);
  EXPECT_EQ(d.dp_shard, 2);
  using Dims = std::vector<std::pair<std::string, int64_t>>;
  EXPECT_EQ(d.mesh_dims(), (Dims{{"dp_shard", 2}, {"cp", 2}, {"tp", 2}}));
  p.data_parallel_replicate_degree = 2;
  p.data_parallel_shard_degree = 1;
  p.tensor_parallel_degree = 1;
  d = ParallelDims::from_config(p, 4);
  EXPECT_TRUE(d.fsdp_enabled());
  EXPECT_FALSE(d.ddp_enabled());
  EXPECT_EQ(d.dp(), 2);
  p.data_parallel_replicate_degree = 1;
  p.data_parallel_shard_degree = 2;
  try {
    ParallelDims::from_config(p, 2);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("context_parallel_degree (2)"), std::string::npos) << e.what();
  }
}

// #34: tp 2^62 x pp 4 overflowed the product to 0, and resolving data_parallel_shard_degree = -1
// divided by it (SIGFPE). Any product beyond the world size is refused by name instead.
TEST(ParallelDims, DegreesWhoseProductOverflowsAreRefusedByName) {
  for (int64_t shard : {int64_t(-1), int64_t(1), int64_t(4)}) {
    config::Parallelism p;
    p.tensor_parallel_degree = int64_t(1) << 62;
    p.pipeline_parallel_degree = 4;
    p.data_parallel_shard_degree = shard;
    try {
      ParallelDims::from_config(p, 8);
      FAIL() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("tensor_parallel_degree (4611686018427387904)"), std::string::npos)
          << e.what();
    }
  }
  config::Parallelism p;
  p.tensor_parallel_degree = int64_t(1) << 31;
  p.data_parallel_shard_degree = int64_t(1) << 33;  // the product 2^64 wraps to 0, which is not 8 either
  EXPECT_THROW(ParallelDims::from_config(p, 8), ConfigError);
}

}  // namespace
}  // namespace ctitan::distributed

// The same membership, checked with real Gloo groups: 4 thread ranks over one in-memory store;
// each group all-gathers its members' global ranks, which must be the ranks the mesh's coordinates
// name, in group-rank order.
namespace ctitan::distributed {
namespace {

TEST(DeviceMesh, RealGroupsMatchTheCoordinatesFor2x2And1x4) {
  for (auto [replicate, shard] : {std::pair<int64_t, int64_t>{2, 2}, {1, 4}}) {
    auto store = testing::in_memory_store();
    std::vector<std::map<std::string, Ranks>> seen(4);
    auto errors = testing::on_thread_ranks(4, [&](int rank) {
      DeviceMesh mesh({"dp_replicate", "dp_shard"}, {replicate, shard}, rank);
      mesh.flatten({"dp_replicate", "dp_shard"}, "dp");
      mesh.create_groups(store, std::chrono::seconds(60));
      for (const std::string dim : {"dp_replicate", "dp_shard", "dp"}) {
        auto group = mesh.group(dim);
        auto mine = torch::tensor({int64_t(rank)}, torch::kLong);
        auto gathered = torch::empty({group->size()}, torch::kLong);
        group->all_gather_into_tensor(gathered, mine);
        seen[size_t(rank)][dim] = Ranks(gathered.data_ptr<int64_t>(), gathered.data_ptr<int64_t>() + gathered.numel());
        EXPECT_EQ(group->rank(), mesh.local_rank(dim)) << dim << " rank " << rank;
        EXPECT_EQ(seen[size_t(rank)][dim], mesh.group_ranks(dim)) << dim << " rank " << rank;
      }
    });
    ASSERT_EQ(testing::rank_errors(errors), "");
    if (replicate == 2) {
      // Rank 3 = coordinate (1, 1): replicate group {1, 3}, shard group {2, 3}.
      EXPECT_EQ(seen[3]["dp_replicate"], (Ranks{1, 3}));
      EXPECT_EQ(seen[3]["dp_shard"], (Ranks{2, 3}));
    } else {
      EXPECT_EQ(seen[2]["dp_shard"], (Ranks{0, 1, 2, 3}));
      EXPECT_EQ(seen[2]["dp_replicate"], (Ranks{2}));
    }
    for (int r = 0; r < 4; ++r) EXPECT_EQ(seen[size_t(r)]["dp"], (Ranks{0, 1, 2, 3}));
  }
}

}  // namespace
}  // namespace ctitan::distributed
