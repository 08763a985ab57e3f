// A collective that one rank never joins is a one-line timeout error on the others, not a hang:
// real processes through the launcher, since a stuck peer is what the timeout exists for.
#include <gtest/gtest.h>

#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

// Rank 0 skips all_reduce #2; ranks 1 and 2 must each report the timeout, naming the collective,
// group, rank and shape, and the rank that never issued it (from the group's progress board),
// and exit 1. A hang would hit the 120 s limit of
// run_program and fail the exit-code check.
TEST(CliCollectives, SkippedCollectiveIsATimeoutErrorNotAHang) {
  auto r = testing::run_ctitan({"run", "--nproc-per-node", "3", "--master-port", "0", "--exec",
                                CTITAN_TIMEOUT_WORKER, "3"},
                               120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  for (int rank : {1, 2}) {
    auto line = "collective_timeout_worker: error: collective timeout: all_reduce #2 on group 'world' (rank " +
                std::to_string(rank) + " of 3, 1024 x float) did not complete within 3s; not issued by rank 0 (last "
                "issued #1) of group 'world'";
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("rank 0 skips all_reduce #2 on purpose"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

// FSDP(2) on the tiny job, 8 steps, comm.train_timeout_seconds 5, with rank 1 stopping itself
// (SIGSTOP) where the fault variable `fault` says (at step 4). A hang would hit run_program's
// 120 s limit and fail the callers' checks.
testing::RunResult run_with_rank_one_stalled(const char* fault, const std::string& checkpoint_interval) {
  testing::TempDir dir;
  setenv(fault, "4", 1);
  setenv("CTITAN_FAULT_RANK", "1", 1);
  auto r = testing::run_ctitan(
      testing::concat(testing::concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                      testing::tiny_job_args(dir.path())),
                      {"--parallelism.data_parallel_shard_degree", "2", "--training.local_batch_size", "2",
                       "--training.steps", "8", "--checkpoint.enable", "true", "--checkpoint.interval",
                       checkpoint_interval, "--comm.train_timeout_seconds", "5"}),
      120);
  unsetenv(fault);
  unsetenv("CTITAN_FAULT_RANK");
  EXPECT_NE(r.exit_code, 0) << r.output;
  return r;
}

// Issue #17: a rank stalled during a checkpoint save took 331 s to fail under
// comm.train_timeout_seconds 10, with a stack trace. Rank 1 stops at the start of the step-4
// save; rank 0 waits for its plan for the train timeout, then fails with one line naming the
// rank that did not arrive, and the launcher stops the job (the stopped rank too).
TEST(CliCollectives, RankStalledInACheckpointSaveIsNamedWithinTheTimeout) {
  auto r = run_with_rank_one_stalled("CTITAN_FAULT_STALL_IN_SAVE_AT_STEP", "4");
  EXPECT_NE(r.output.find("rank 1 stops itself (SIGSTOP) in the checkpoint save of step 4"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[rank0]:ctitan: error: checkpoint exchange #"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("timed out after 5s on rank 0 of 2: rank(s) 1 did not arrive"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Socket Timeout"), std::string::npos) << r.output;
  // c10d's own warnings came before ctitan's line (#34); the binary keeps c10's log off.
  for (const char* noise : {"[c10d]", "frame #", "Exception raised from"}) {
    EXPECT_EQ(r.output.find(noise), std::string::npos) << noise << "\n" << r.output;
  }
}

// Issue #17: stall errors named the rank that noticed, not the rank that stalled. Rank 1 stops
// after step 4; rank 0's next collective times out and names rank 1 as the one that never
// issued it.
TEST(CliCollectives, StalledRankIsNamedByTheRankThatTimedOut) {
  auto r = run_with_rank_one_stalled("CTITAN_FAULT_STALL_AT_STEP", "100");
  EXPECT_NE(r.output.find("rank 1 stops itself (SIGSTOP) after step 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("collective timeout: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not complete within 5s; not issued by rank 1 (last issued #"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ctitan
