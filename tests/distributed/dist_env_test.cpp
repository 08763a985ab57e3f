#include "ctitan/distributed/dist_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/distributed/init_distributed.h"
#include "support/thread_ranks.h"

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

// Slurm's SLURM_TASKS_PER_NODE compresses runs ("2(x3),1": nodes 0-2 run 2 tasks, node 3 runs
// 1); SLURM_NTASKS_PER_NODE, set only with --ntasks-per-node, wins when present.
TEST(DistEnv, SlurmTasksPerNodeListsEachNodesCount) {
  auto local_size = [](const char* list, const char* node) {
    EnvScope env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "7"}, {"SLURM_TASKS_PER_NODE", list}, {"SLURM_NODEID", node}});
    return read_dist_env().local_world_size;
  };
  EXPECT_EQ(local_size("2(x3),1", "0"), 2);
  EXPECT_EQ(local_size("2(x3),1", "2"), 2);
  EXPECT_EQ(local_size("2(x3),1", "3"), 1);
  EXPECT_EQ(local_size("4", "0"), 4);
  EXPECT_EQ(local_size("3,2(x2)", "2"), 2);
  {
    EnvScope env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "7"}, {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                  {"SLURM_NTASKS_PER_NODE", "5"}});
    EXPECT_EQ(read_dist_env().local_world_size, 5);
  }
  for (const auto& [list, node, needle] : std::vector<std::tuple<const char*, const char*, std::string>>{
           {"2(x3),1", "4", "lists 4 nodes; SLURM_NODEID=4 is not one of them"},
           {"2(x3", "0", "is not a list of counts"},
           {"2(x0)", "0", "is not a list of counts"},
           {"0", "0", "is not a list of counts"},
           {"2,,1", "0", "is not a list of counts"},
           {"2(x99999999999)", "0", "is not a list of counts"}}) {
    EnvScope env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "7"}, {"SLURM_TASKS_PER_NODE", list}, {"SLURM_NODEID", node}});
    try {
      read_dist_env();
      ADD_FAILURE() << list << " on node " << node << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_TASKS_PER_NODE='" + std::string(list) + "' "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
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
  // #34: a node of 0 processes divided by zero later (SIGFPE on every rank).
  using Vars = std::vector<std::pair<const char*, const char*>>;
  for (const auto& [vars, name] :
       std::vector<std::pair<Vars, std::string>>{
           {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "0"}}, "LOCAL_WORLD_SIZE=0"},
           {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NTASKS_PER_NODE", "0"}}, "SLURM_NTASKS_PER_NODE=0"},
           // A local rank outside the node named a device and a memory share that do not exist.
           {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "99"}, {"LOCAL_WORLD_SIZE", "1"}}, "local rank 99"},
           {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "-7"}}, "local rank -7"}}) {
    EnvScope env(vars);
    try {
      read_dist_env();
      FAIL() << name << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

// Rendezvous on thread ranks over one in-memory store: each call gets (rank, WORLD_SIZE); every
// participant's one-line error, "" for one that joined.
std::vector<std::string> rendezvous(const std::vector<std::pair<int, int>>& claims) {
  auto store = testing::in_memory_store();
  std::vector<std::string> errors(claims.size());
  testing::on_thread_ranks(int(claims.size()), [&](int i) {
    try {
      join_rendezvous(*store, claims[size_t(i)].first, claims[size_t(i)].second, std::chrono::seconds(20));
    } catch (const InputError& e) {
      errors[size_t(i)] = e.what();
    }
  });
  return errors;
}

TEST(Rendezvous, MatchingRanksJoin) {
  EXPECT_EQ(rendezvous({{0, 3}, {1, 3}, {2, 3}}), (std::vector<std::string>{"", "", ""}));
}

// Issue #17: WORLD_SIZE 2 vs 3 hung until the init timeout with "Socket Timeout". Both ranks now
// stop at once, naming both values.
TEST(Rendezvous, DisagreeingWorldSizesStopEveryRankNamingThem) {
  for (const auto& e : rendezvous({{0, 2}, {1, 3}})) {
    EXPECT_NE(e.find("rendezvous error: rank "), std::string::npos) << e;
    EXPECT_NE(e.find("has WORLD_SIZE"), std::string::npos) << e;
    EXPECT_TRUE(e.find("WORLD_SIZE 2 but rank") != std::string::npos || e.find("WORLD_SIZE 3 but rank") != std::string::npos)
        << e;
  }
}

// Issue #17: two ranks with the same RANK gave "Address already in use". Both stop, naming the
// RANK and both processes.
TEST(Rendezvous, ARankGivenTwiceStopsEveryRankNamingIt) {
  for (const auto& e : rendezvous({{0, 2}, {0, 2}})) {
    EXPECT_NE(e.find("rendezvous error: RANK 0 is given to two processes (pid "), std::string::npos) << e;
  }
}

TEST(Rendezvous, ARankThatNeverArrivesIsNamed) {
  auto store = testing::in_memory_store();
  try {
    join_rendezvous(*store, 0, 3, std::chrono::milliseconds(300));
    FAIL() << "joined without ranks 1 and 2";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "rendezvous error: rank 0 waited 0s for rank(s) 1, 2 of WORLD_SIZE 3 "
                                     "(comm.init_timeout_seconds)");
  }
}

}  // namespace
}  // namespace ctitan::distributed
