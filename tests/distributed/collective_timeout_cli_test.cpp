// A collective that one rank never joins is a one-line timeout error on the others, not a hang:
// real processes through the launcher, since a stuck peer is what the timeout exists for.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace ctitan {
namespace {

// Rank 0 skips all_reduce #2; ranks 1 and 2 must each report the timeout, naming the collective,
// group, rank and shape, and exit 1. A hang would hit the 120 s limit of
// run_program and fail the exit-code check.
TEST(CliCollectives, SkippedCollectiveIsATimeoutErrorNotAHang) {
  auto r = testing::run_ctitan({"run", "--nproc-per-node", "3", "--master-port", "0", "--exec",
                                CTITAN_TIMEOUT_WORKER, "3"},
                               120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  for (int rank : {1, 2}) {
    auto line = "collective_timeout_worker: error: collective timeout: all_reduce #2 on group 'world' (rank " +
                std::to_string(rank) + " of 3, 1024 x float) did not complete within 3s";
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("rank 0 skips all_reduce #2 on purpose"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ctitan
