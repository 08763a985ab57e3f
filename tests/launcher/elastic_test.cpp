// `ctitan run --nnodes MIN:MAX`: a node lost for good shrinks the world instead of ending the job.
// Two launchers ("nodes") on loopback, one worker each, FSDP over both. Node 1's rank stops after
// step 13 (SIGSTOP, a hung host) and node 1's launcher is then SIGKILLed, so node 1 is gone. Node
// 0's worker loses its peer, node 0 restarts the round, waits --rdzv-conf last_call_timeout for
// node 1, starts with itself alone (world 1) and resumes from step 10, resharded from 2 ranks to
// 1. The global batch stays 4 sequences: 2 ranks x 2, then 1 rank x 2 x 2 accumulation steps.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <thread>

#include "support/processes.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using testing::concat;
using Args = std::vector<std::string>;
using Metrics = std::map<int64_t, double>;  // step -> loss

const Args kJob = {"--checkpoint.enable", "true", "--checkpoint.interval", "10", "--checkpoint.last_save_model_only",
                   "false", "--training.steps", "20", "--metrics.log_freq", "1",
                   "--training.local_batch_size", "2", "--training.global_batch_size", "4",
                   "--parallelism.data_parallel_shard_degree", "-1"};

Args train_args(const fs::path& dir) { return concat(concat({"train"}, testing::tiny_job_args(dir)), kJob); }

Metrics losses(const fs::path& dir) {
  Metrics out;
  for (const auto& row : testing::read_jsonl((dir / "metrics.jsonl").string())) {
    if (row.contains("loss")) out[row["step"].get<int64_t>()] = row["loss"].get<double>();
  }
  return out;
}

Args elastic_node(int node_rank, int port, int max_restarts) {
  return {"run", "--nnodes", "1:2", "--node-rank", std::to_string(node_rank), "--master-port", std::to_string(port),
          "--max-restarts", std::to_string(max_restarts), "--rdzv-conf", "last_call_timeout=1",
          "--heartbeat-timeout", "5"};
}

TEST(CliElastic, LostNodeShrinksTheWorldAndTrainingContinuesFromTheCheckpoint) {
  testing::TempDir job, reference;
  int port = testing::free_port();
  auto out0 = job.file("node0.txt"), out1 = job.file("node1.txt");
  pid_t node1 = testing::spawn_ctitan(concat(elastic_node(1, port, 1), train_args(job.path())), out1,
                                      {"CTITAN_FAULT_STALL_AT_STEP=13", "CTITAN_FAULT_RANK=1"});
  pid_t node0 = testing::spawn_ctitan(concat(elastic_node(0, port, 1), train_args(job.path())), out0);
  bool stalled = testing::wait_until(
      [&] { return testing::read_file(out1).find("stops itself (SIGSTOP) after step 13") != std::string::npos; }, 120);
  kill(node1, SIGKILL);  // the node is gone: its launcher, and with it (PDEATHSIG) its stopped worker
  testing::wait_exit_or_kill(node1, 10);
  int code = testing::wait_exit_or_kill(node0, 180);
  auto log0 = testing::read_file(out0);
  ASSERT_TRUE(stalled) << testing::read_file(out1);
  ASSERT_EQ(code, 0) << log0;
  EXPECT_NE(log0.find("run: round 0: nodes 0,1, world size 2"), std::string::npos) << log0;
  EXPECT_NE(log0.find("run: round 1: nodes 0, world size 1"), std::string::npos) << log0;
  EXPECT_NE(log0.find("resumed from checkpoint"), std::string::npos) << log0;
  ASSERT_EQ(testing::first_logged_step(log0.substr(log0.find("run: round 1:"))), 11) << log0;

  // From step 10 on, the shrunk job is one worker resuming the 2-rank checkpoint: the same code
  // path, data order, threads and arithmetic, so the losses must be equal bitwise.
  fs::create_directories(reference.path() / "checkpoint");
  fs::copy(job.path() / "checkpoint" / "step-10", reference.path() / "checkpoint" / "step-10",
           fs::copy_options::recursive);
  auto one = testing::run_ctitan(concat({"run", "--standalone"}, train_args(reference.path())), 120);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto shrunk = losses(job.path()), resumed = losses(reference.path());
  for (int64_t step = 11; step <= 20; ++step) {
    ASSERT_TRUE(shrunk.count(step) && resumed.count(step)) << "step " << step;
    EXPECT_EQ(shrunk[step], resumed[step]) << "step " << step;
  }

  // And the curve continues where it was: an uninterrupted 2-rank run of the same global batch
  // sees the same samples per step; only the summation order differs (2 ranks' partial sums vs 2
  // accumulation steps), ~1e-7 relative per step carried by AdamW, so 1e-4 holds with margin,
  // while a lost or repeated window, or a batch of 2 instead of 4, moves the loss by percents.
  testing::TempDir whole;
  auto two = testing::run_ctitan(concat({"run", "--nproc-per-node", "2", "--master-port", "0"},
                                        train_args(whole.path())),
                                 180);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto uninterrupted = losses(whole.path());
  for (int64_t step = 1; step <= 20; ++step) {
    ASSERT_TRUE(uninterrupted.count(step)) << "step " << step;
    EXPECT_NEAR(shrunk[step], uninterrupted[step], 1e-4 * uninterrupted[step]) << "step " << step;
  }
}

// A node that arrives after an elastic round started is admitted at the next round: the running
// nodes end their round for it without using a restart, as torchelastic does.
TEST(CliElastic, LateNodeIsAdmittedAtTheNextRound) {
  testing::TempDir dir;
  int port = testing::free_port();
  // Round 0 (node 0 alone) runs until its launcher stops it; round 1 (both nodes) exits at once.
  const char* script = "echo R=$RANK W=$WORLD_SIZE C=$TORCHELASTIC_RESTART_COUNT; "
                       "[ $WORLD_SIZE = 2 ] || exec sleep 60";
  auto node_args = [&](int rank) {
    // No restart allowed: admitting node 1 must not need one.
    return concat(elastic_node(rank, port, 0), {"--exec", "/bin/sh", "-c", script});
  };
  pid_t node0 = testing::spawn_ctitan(node_args(0), dir.file("node0.txt"));
  bool alone = testing::wait_until(
      [&] { return testing::read_file(dir.file("node0.txt")).find("R=0 W=1 C=0") != std::string::npos; }, 30);
  pid_t node1 = testing::spawn_ctitan(node_args(1), dir.file("node1.txt"));
  int code1 = testing::wait_exit_or_kill(node1, 60), code0 = testing::wait_exit_or_kill(node0, 60);
  auto log0 = testing::read_file(dir.file("node0.txt")), log1 = testing::read_file(dir.file("node1.txt"));
  ASSERT_TRUE(alone) << log0;
  EXPECT_EQ(code0, 0) << log0;
  EXPECT_EQ(code1, 0) << log1;
  EXPECT_NE(log0.find("node 1 waits to join"), std::string::npos) << log0;
  EXPECT_NE(log0.find("R=0 W=2 C=1"), std::string::npos) << log0;
  EXPECT_NE(log1.find("R=1 W=2 C=1"), std::string::npos) << log1;
}

TEST(CliElastic, BadNnodesIsOneLineAndExitTwo) {
  for (const auto& [nnodes, message] : std::vector<std::pair<std::string, std::string>>{
           {"3:2", "MIN must be in [1, MAX]"}, {"0:2", "is not N or MIN:MAX"}, {"a:2", "is not N or MIN:MAX"},
           {"1:", "is not N or MIN:MAX"}}) {
    auto r = testing::run_ctitan({"run", "--nnodes", nnodes, "--master-port", "29999", "--exec", "/bin/true"}, 30);
    EXPECT_EQ(r.exit_code, 2) << nnodes << ": " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << nnodes << ": " << r.output;
  }
  auto conf = testing::run_ctitan({"run", "--rdzv-conf", "no_such_key=1", "--standalone", "--exec", "/bin/true"}, 30);
  EXPECT_EQ(conf.exit_code, 2) << conf.output;
  EXPECT_NE(conf.output.find("--rdzv-conf key 'no_such_key' is not supported"), std::string::npos) << conf.output;
}

}  // namespace
}  // namespace ctitan
