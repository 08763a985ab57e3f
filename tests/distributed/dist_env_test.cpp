#include "ctitan/distributed/dist_env.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "ctitan/common/error.h"

namespace ctitan::distributed {
namespace {

// Sets variables for one test and clears every launcher variable afterwards.
class EnvScope {
 public:
  explicit EnvScope(std::vector<std::pair<const char*, const char*>> vars) {
    clear();
    for (auto [k, v] : vars) setenv(k, v, 1);
  }
  ~EnvScope() { clear(); }

 private:
  static void clear() {
    for (auto k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                   "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE", "SLURM_PROCID", "SLURM_NTASKS",
                   "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_RANK",
                   "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
      unsetenv(k);
    }
  }
};

TEST(DistEnv, NoLauncherMeansOneProcess) {
  EnvScope env({});
  auto e = read_dist_env();
  EXPECT_FALSE(e.distributed());
  EXPECT_EQ(e.source, "none");
}

TEST(DistEnv, TorchrunVariables) {
  EnvScope env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"},
                {"TORCHELASTIC_RESTART_COUNT", "2"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  auto e = read_dist_env();
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.group_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_EQ(e.restart_count, 2);
  EXPECT_TRUE(e.agent_store);
}

TEST(DistEnv, SlurmAndOpenMpiVariables) {
  {
    EnvScope env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"}});
    auto e = read_dist_env();
    EXPECT_EQ(e.source, "slurm");
    EXPECT_EQ(e.rank, 5);
    EXPECT_EQ(e.world_size, 8);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.group_rank, 2);
  }
  {
    EnvScope env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
    auto e = read_dist_env();
    EXPECT_EQ(e.source, "openmpi");
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.world_size, 2);
  }
}

TEST(DistEnv, BadValuesNameTheVariable) {
  {
    EnvScope env({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
    try {
      read_dist_env();
      FAIL();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("RANK='one'"), std::string::npos) << e.what();
    }
  }
  {
    EnvScope env({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    EXPECT_THROW(read_dist_env(), InputError);
  }
}

}  // namespace
}  // namespace ctitan::distributed
