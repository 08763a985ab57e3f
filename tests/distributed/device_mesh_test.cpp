#include "ctitan/distributed/device_mesh.h"

#include <gtest/gtest.h>

#include "ctitan/common/error.h"
#include "ctitan/distributed/parallel_dims.h"
#include "support/test_support.h"

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
  EXPECT_THROW(mesh.group_ranks("pp"), InputError);
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

}  // namespace
}  // namespace ctitan::distributed

// The same membership, checked with real process groups: 4 ranks through the launcher, each group
// all-gathers its members' global ranks and compares with the mesh's coordinates.
namespace ctitan {
namespace {

TEST(CliMesh, RealGroupsMatchTheCoordinatesFor2x2And1x4) {
  for (std::string shape : {"2x2", "1x4"}) {
    auto r = testing::run_ctitan({"run", "--nproc-per-node", "4", "--master-port", "0", "selftest", "mesh",
                                  "--shape", shape}, 90);
    ASSERT_EQ(r.exit_code, 0) << shape << "\n" << r.output;
    if (shape == "2x2") {
      // Rank 3 = coordinate (1, 1): replicate group {1, 3}, shard group {2, 3}.
      EXPECT_NE(r.output.find("rank 3 coordinate (1,1) dp_replicate: [1,3]"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("rank 3 coordinate (1,1) dp_shard: [2,3]"), std::string::npos) << r.output;
    } else {
      EXPECT_NE(r.output.find("rank 2 coordinate (0,2) dp_shard: [0,1,2,3]"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("rank 2 coordinate (0,2) dp_replicate: [2]"), std::string::npos) << r.output;
    }
  }
}

}  // namespace
}  // namespace ctitan
