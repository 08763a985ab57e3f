// RPC between real processes: rpc_test_worker's scenarios on 2 workers through `ctitan run`.
// Each worker checks its own results (tests/rpc/rpc_test_worker.cpp says what each scenario
// covers) and prints "<worker>: <scenario>: N checks passed", or one FAILED line and exits 1.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace ctitan {
namespace {

// The line worker `worker` printed for `scenario`, or "" if it printed none.
std::string result_line(const std::string& output, const std::string& worker, const std::string& scenario) {
  const std::string prefix = worker + ": " + scenario + ": ";
  auto at = output.find(prefix);
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

void run_scenario(const std::string& scenario) {
  auto r = testing::run_ctitan({"run", "--nproc-per-node", "2", "--master-port", "0", "--exec", CTITAN_RPC_WORKER,
                                scenario},
                               120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* worker : {"worker0", "worker1"}) {
    auto line = result_line(r.output, worker, scenario);
    EXPECT_NE(line.find("checks passed"), std::string::npos) << worker << ": [" << line << "]\n" << r.output;
  }
  EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  // The agent's own warnings are silenced (CTITAN_RPC_VERBOSE=1 shows them).
  EXPECT_EQ(r.output.find("[W"), std::string::npos) << r.output;
}

TEST(CliRpc, CallsCarryEveryValueKindBothWays) { run_scenario("calls"); }

TEST(CliRpc, ErrorsAreOneLineRpcErrorsOfTheRightKind) { run_scenario("errors"); }

// A worker whose check fails exits 1 with one line, and `ctitan run` fails: the scenarios above
// can fail.
TEST(CliRpc, UnknownScenarioFailsWithOneLine) {
  auto r = testing::run_ctitan({"run", "--nproc-per-node", "2", "--master-port", "0", "--exec", CTITAN_RPC_WORKER,
                                "no_such_scenario"},
                               120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no_such_scenario: FAILED after 0 checks: unknown scenario 'no_such_scenario'"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ctitan
