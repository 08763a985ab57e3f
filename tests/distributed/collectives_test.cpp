// Collectives across real processes: `ctitan run ... selftest collectives` checks every collective
// x dtype x op x size (sync and async, sub-groups at 4 ranks) against values computed locally,
// and the timeout test checks that a skipped collective is reported in one line, not a hang.
#include <gtest/gtest.h>

#include <chrono>

#include "support/test_support.h"

namespace ctitan {
namespace {

testing::RunResult run_selftest(int nproc, std::vector<std::string> extra = {}, int timeout_s = 300) {
  std::vector<std::string> args{"run", "--nproc-per-node", std::to_string(nproc), "--master-port", "0",
                                "selftest", "collectives"};
  args.insert(args.end(), extra.begin(), extra.end());
  return testing::run_ctitan(args, timeout_s);
}

void expect_all_checks_pass(int nproc) {
  auto r = run_selftest(nproc);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (auto group : {"all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "broadcast",
                     "padding round trip", "async buffer release", "stats and sequence numbers"}) {
    EXPECT_NE(r.output.find(std::string(group) + " "), std::string::npos) << group << "\n" << r.output;
  }
  if (nproc >= 4) {
    EXPECT_NE(r.output.find("sub-groups of 2"), std::string::npos) << r.output;
  }
  EXPECT_NE(r.output.find("all checks passed on " + std::to_string(nproc) + " ranks"), std::string::npos)
      << r.output;
}

TEST(CliCollectives, TwoRanks) { expect_all_checks_pass(2); }
TEST(CliCollectives, ThreeRanks) { expect_all_checks_pass(3); }
TEST(CliCollectives, FourRanksWithSubGroups) { expect_all_checks_pass(4); }

// Rank 0 skips all_reduce #2; ranks 1 and 2 must each fail with the one-line timeout error within
// the 3 s timeout (the whole run well under 30 s: no hang, no abort).
TEST(CliCollectives, SkippedCollectiveIsATimeoutErrorNotAHang) {
  auto start = std::chrono::steady_clock::now();
  auto r = run_selftest(3, {"--timeout-test", "--timeout-seconds", "3"}, 60);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 30) << r.output;
  for (int rank : {1, 2}) {
    auto line = "ctitan: error: collective timeout: all_reduce #2 on group 'world' (rank " + std::to_string(rank) +
                " of 3, 1024 x float) did not complete within 3s";
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("rank 0 skips all_reduce #2 on purpose"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("killed after timeout"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ctitan
