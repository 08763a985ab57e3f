// `ctitan run` as a user runs it: worker environment, prefixed output, failure summaries,
// restarts, two launchers on loopback, no orphans after the launcher is stopped or killed.
// Workers are /bin/sh scripts (--exec) so that each test takes a second or two, not a training run.
// Every test uses --master-port 0 (or a port just found free) so that tests can run concurrently.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/processes.h"
#include "support/test_support.h"

namespace ctitan {
namespace {

using Clock = std::chrono::steady_clock;
using testing::free_port;
using testing::process_gone;
using testing::RunResult;
using testing::spawn_ctitan;
using testing::TempDir;
using testing::wait_exit;
using testing::wait_until;

std::vector<std::string> run_args(std::vector<std::string> flags, const std::string& script) {
  flags.insert(flags.begin(), "run");
  for (std::string s : {"--exec", "/bin/sh", "-c"}) flags.push_back(s);
  flags.push_back(script);
  return flags;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int count_lines(const std::string& text, const std::string& line) {
  int n = 0;
  for (const auto& l : lines_of(text)) n += l == line;
  return n;
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

std::string last_line(const std::string& text) {
  auto lines = lines_of(text);
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines.empty() ? "" : lines.back();
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Pids that the workers printed as "[rankN]:PID=<pid>".
std::vector<pid_t> printed_pids(const std::string& text) {
  std::vector<pid_t> pids;
  std::regex re(R"(^\[rank\d+\]:PID=(\d+)$)");
  for (const auto& line : lines_of(text)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) pids.push_back(pid_t(std::stoi(m[1])));
  }
  return pids;
}

// --- 1. environment and output -------------------------------------------------------------

TEST(CliLauncher, SetsTheWorkerEnvironmentAndPrefixesOutput) {
  const char* script =
      "echo R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK P=$MASTER_PORT "
      "C=$TORCHELASTIC_RESTART_COUNT; "
      "echo ROLE=$ROLE_RANK ADDR=$MASTER_ADDR MAX=$TORCHELASTIC_MAX_RESTARTS AGENT=$TORCHELASTIC_USE_AGENT_STORE "
      "OMP=$OMP_NUM_THREADS; printf 'no newline'";
  for (int n : {2, 3}) {
    auto r = testing::run_ctitan(run_args({"--nproc-per-node", std::to_string(n), "--master-port", "0"}, script), 30);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::set<std::string> ports;
    std::regex re(R"(^\[rank(\d+)\]:R=(\d+) L=(\d+) W=(\d+) LW=(\d+) G=(\d+) P=(\d+) C=(\d+)$)");
    int seen = 0;
    for (const auto& line : lines_of(r.output)) {
      std::smatch m;
      if (!std::regex_match(line, m, re)) continue;
      ++seen;
      EXPECT_EQ(m[1], m[2]) << "the prefix names the global rank: " << line;
      EXPECT_EQ(m[2], m[3]) << "one node: RANK == LOCAL_RANK: " << line;
      EXPECT_EQ(m[4], std::to_string(n)) << line;
      EXPECT_EQ(m[5], std::to_string(n)) << line;
      EXPECT_EQ(m[6], "0") << line;
      EXPECT_NE(m[7], "0") << line;
      EXPECT_EQ(m[8], "0") << line;
      ports.insert(m[7]);
    }
    EXPECT_EQ(seen, n) << r.output;
    EXPECT_EQ(ports.size(), 1u) << "every rank must get the same MASTER_PORT\n" << r.output;
    const char* omp = std::getenv("OMP_NUM_THREADS");
    int cores = int(std::thread::hardware_concurrency());
    std::string expected_omp = omp ? omp : std::to_string(std::max(1, cores / n));
    for (int rank = 0; rank < n; ++rank) {
      EXPECT_EQ(count_lines(r.output, fmt::format("[rank{}]:ROLE={} ADDR=127.0.0.1 MAX=0 AGENT=True OMP={}", rank,
                                                  rank, expected_omp)),
                1)
          << r.output;
      EXPECT_EQ(count_lines(r.output, fmt::format("[rank{}]:no newline", rank)), 1)
          << "a final partial line is flushed\n" << r.output;
    }
  }
}

TEST(CliLauncher, RunsACtitanSubcommandWithItsOwnFlags) {
  // Everything after the subcommand name is the worker's, "--help" included.
  auto r = testing::run_ctitan({"run", "--nproc_per_node", "2", "--master_port", "0", "train", "--help"}, 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank : {0, 1}) EXPECT_TRUE(contains(r.output, fmt::format("[rank{}]:Usage:", rank))) << r.output;
}

// --- 2-4. failures and restarts --------------------------------------------------------------

TEST(CliLauncher, FailingRankStopsTheOthersAndIsNamed) {
  auto start = Clock::now();
  auto r = testing::run_ctitan(
      run_args({"--nproc-per-node", "2", "--master-port", "0", "--term-timeout", "3"},
               "if [ $RANK = 1 ]; then echo about to fail; exit 1; fi; exec sleep 30"),
      30);
  double elapsed = seconds_since(start);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(elapsed, 10) << "the sleeping rank must be stopped, not waited for\n" << r.output;
  auto last = last_line(r.output);
  EXPECT_EQ(last.rfind("ctitan: run failed: rank 1 (pid ", 0), 0u) << r.output;
  EXPECT_TRUE(contains(last, "exited with code 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "    [rank1]:about to fail")) << "the summary shows the rank's last lines\n"
                                                                 << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(rank 0 \(pid \d+\) was killed by SIGTERM \(stopped by)")))
      << r.output;
}

TEST(CliLauncher, RankKilledBySignalIsReportedByName) {
  auto r = testing::run_ctitan(
      run_args({"--nproc-per-node", "2", "--master-port", "0"}, "if [ $RANK = 1 ]; then kill -9 $$; fi; exec sleep 30"),
      30);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(std::regex_search(last_line(r.output), std::regex(R"(rank 1 \(pid \d+\) was killed by SIGKILL)")))
      << r.output;
}

TEST(CliLauncher, RestartsOnceThenSucceeds) {
  // Round 0: rank 1 fails while rank 0 sleeps. Round 1: both succeed.
  auto r = testing::run_ctitan(
      run_args({"--nproc-per-node", "2", "--master-port", "0", "--max-restarts", "1"},
               "echo round=$TORCHELASTIC_RESTART_COUNT; "
               "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then [ $RANK = 1 ] && exit 1; exec sleep 30; fi"),
      30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines(r.output, "[rank1]:round=0"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "[rank1]:round=1"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "[rank0]:round=1"), 1) << r.output;
  EXPECT_FALSE(contains(r.output, "round=2")) << r.output;
}

TEST(CliLauncher, AlwaysFailingWorkerStopsAfterTheLastRestart) {
  auto r = testing::run_ctitan(run_args({"--master-port", "0", "--max-restarts", "1"},
                                        "echo round=$TORCHELASTIC_RESTART_COUNT; exit 3"),
                               30);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "[rank0]:round=0"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "[rank0]:round=1"), 1) << r.output;
  EXPECT_FALSE(contains(r.output, "round=2")) << r.output;
  EXPECT_TRUE(contains(r.output, "round 1, 1 of 1 restarts used")) << r.output;
  EXPECT_TRUE(contains(last_line(r.output), "exited with code 3")) << r.output;
}

// --- 5. two launchers ("nodes") on loopback --------------------------------------------------

std::vector<std::string> node_args(int node_rank, int port, std::vector<std::string> extra, const std::string& script,
                                   const std::string& rdzv_timeout = "20") {
  std::vector<std::string> flags{"--nnodes",      "2", "--node-rank",    std::to_string(node_rank),
                                 "--master-port", std::to_string(port), "--rdzv-timeout", rdzv_timeout};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return run_args(flags, script);
}

TEST(CliLauncher, TwoNodesOnLoopback) {
  int port = free_port();
  const char* script = "echo R=$RANK W=$WORLD_SIZE G=$GROUP_RANK L=$LOCAL_RANK";
  RunResult node1;
  // Node 1 starts first: its launcher must wait for node 0's store rather than give up.
  std::thread other([&] { node1 = testing::run_ctitan(node_args(1, port, {}, script), 30); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto node0 = testing::run_ctitan(node_args(0, port, {}, script), 30);
  other.join();
  ASSERT_EQ(node0.exit_code, 0) << node0.output << "\n--- node 1:\n" << node1.output;
  ASSERT_EQ(node1.exit_code, 0) << node1.output << "\n--- node 0:\n" << node0.output;
  EXPECT_EQ(count_lines(node0.output, "[rank0]:R=0 W=2 G=0 L=0"), 1) << node0.output;
  EXPECT_EQ(count_lines(node1.output, "[rank1]:R=1 W=2 G=1 L=0"), 1) << node1.output;
}

TEST(CliLauncher, FailureOnOneNodeRestartsBothNodes) {
  int port = free_port();
  // Round 0: rank 1 (node 1) fails, rank 0 (node 0) sleeps until node 0's launcher stops it.
  const char* script =
      "echo C=$TORCHELASTIC_RESTART_COUNT R=$RANK; "
      "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then [ $RANK = 1 ] && exit 1; exec sleep 30; fi";
  auto start = Clock::now();
  RunResult node1;
  std::thread other([&] { node1 = testing::run_ctitan(node_args(1, port, {"--max-restarts", "1"}, script), 30); });
  auto node0 = testing::run_ctitan(node_args(0, port, {"--max-restarts", "1"}, script), 30);
  other.join();
  EXPECT_LT(seconds_since(start), 15);
  ASSERT_EQ(node0.exit_code, 0) << node0.output << "\n--- node 1:\n" << node1.output;
  ASSERT_EQ(node1.exit_code, 0) << node1.output << "\n--- node 0:\n" << node0.output;
  EXPECT_EQ(count_lines(node1.output, "[rank1]:C=0 R=1"), 1) << node1.output;
  EXPECT_EQ(count_lines(node1.output, "[rank1]:C=1 R=1"), 1) << node1.output;
  EXPECT_EQ(count_lines(node0.output, "[rank0]:C=1 R=0"), 1) << node0.output;
}

TEST(CliLauncher, FailureOnOneNodeStopsBothNodesWithoutRestarts) {
  int port = free_port();
  const char* script = "if [ $RANK = 1 ]; then exit 7; fi; exec sleep 30";
  auto start = Clock::now();
  RunResult node1;
  std::thread other([&] { node1 = testing::run_ctitan(node_args(1, port, {}, script), 30); });
  auto node0 = testing::run_ctitan(node_args(0, port, {}, script), 30);
  other.join();
  EXPECT_LT(seconds_since(start), 15);
  EXPECT_EQ(node0.exit_code, 1) << node0.output;
  EXPECT_EQ(node1.exit_code, 1) << node1.output;
  std::regex remote_cause(R"(rank 1 \(pid \d+\) exited with code 7 on node 1)");
  EXPECT_TRUE(std::regex_search(last_line(node0.output), remote_cause)) << node0.output;
  EXPECT_TRUE(contains(last_line(node1.output), "exited with code 7")) << node1.output;
}

TEST(CliLauncher, RendezvousTimeoutNamesTheMissingNode) {
  auto r = testing::run_ctitan(node_args(0, free_port(), {}, "true", "1"), 30);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(last_line(r.output), "node rank(s) 1 never arrived")) << r.output;
}

// --- 6. no orphans -----------------------------------------------------------------------------

// Starts a launcher of two sleeping workers and returns its pid and the workers' pids.
std::pair<pid_t, std::vector<pid_t>> start_sleepers(const std::string& out_path) {
  pid_t launcher = spawn_ctitan(
      run_args({"--nproc-per-node", "2", "--master-port", "0", "--term-timeout", "2"}, "echo PID=$$; exec sleep 30"),
      out_path);
  std::vector<pid_t> pids;
  wait_until([&] { return (pids = printed_pids(testing::read_file(out_path))).size() == 2; }, 10);
  return {launcher, pids};
}

TEST(CliLauncher, SigtermIsForwardedAndLeavesNoWorker) {
  TempDir dir;
  auto [launcher, pids] = start_sleepers(dir.file("out.txt"));
  ASSERT_EQ(pids.size(), 2u) << testing::read_file(dir.file("out.txt"));
  kill(launcher, SIGTERM);
  int code = wait_exit(launcher, 10);
  if (code < 0) kill(launcher, SIGKILL), waitpid(launcher, nullptr, 0);
  EXPECT_EQ(code, 128 + SIGTERM) << testing::read_file(dir.file("out.txt"));
  for (pid_t pid : pids) EXPECT_TRUE(wait_until([&] { return process_gone(pid); }, 3)) << "worker " << pid;
}

TEST(CliLauncher, Kill9OfTheLauncherKillsTheWorkers) {
  TempDir dir;
  auto [launcher, pids] = start_sleepers(dir.file("out.txt"));
  ASSERT_EQ(pids.size(), 2u) << testing::read_file(dir.file("out.txt"));
  kill(launcher, SIGKILL);
  EXPECT_EQ(wait_exit(launcher, 10), 128 + SIGKILL);
  for (pid_t pid : pids) EXPECT_TRUE(wait_until([&] { return process_gone(pid); }, 3)) << "worker " << pid;
}

// --- 7. log files and the console filter --------------------------------------------------------

TEST(CliLauncher, LogDirHasEveryRanksOutputAndTheFilterOnlyHidesTheConsole) {
  TempDir dir;
  auto r = testing::run_ctitan(run_args({"--nproc-per-node", "2", "--master-port", "0", "--log-dir",
                                         dir.file("logs"), "--local-ranks-filter", "1"},
                                        "echo out$RANK; echo err$RANK >&2"),
                               30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines(r.output, "[rank1]:out1"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "[rank1]:err1"), 1) << r.output;
  EXPECT_FALSE(contains(r.output, "[rank0]:")) << r.output;
  for (int rank : {0, 1}) {
    auto log = testing::read_file(dir.file(fmt::format("logs/attempt_0/rank_{}.log", rank)));
    EXPECT_EQ(count_lines(log, fmt::format("out{}", rank)), 1) << log;
    EXPECT_EQ(count_lines(log, fmt::format("err{}", rank)), 1) << log;
  }
}

// torchrun's routing: --redirects 3 sends both streams to the files only, and --tee 0:2 brings
// rank 0's stderr back to the console (a teed stream is shown even when redirected, as in
// torchrun) while it stays in the file; --standalone needs no port; --rdzv-id and --role reach
// the workers as torchrun passes them.
TEST(CliLauncher, TorchrunsTeeRedirectsStandaloneRdzvIdAndRole) {
  TempDir dir;
  auto r = testing::run_ctitan(run_args({"--standalone", "--nproc_per_node", "2", "--log_dir", dir.file("logs"),
                                         "--redirects", "3", "--tee", "0:2", "--rdzv_backend", "c10d",
                                         "--rdzv_id", "job42", "--role", "trainer"},
                                        "echo out$RANK $TORCHELASTIC_RUN_ID $ROLE_NAME; echo err$RANK >&2"),
                               30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "[rank0]:out0")) << r.output;
  EXPECT_FALSE(contains(r.output, "[rank1]:out1")) << r.output;
  EXPECT_FALSE(contains(r.output, "[rank1]:err1")) << r.output;
  EXPECT_EQ(count_lines(r.output, "[rank0]:err0"), 1) << "rank 0's stderr is teed\n" << r.output;
  for (int rank : {0, 1}) {
    auto log = testing::read_file(dir.file(fmt::format("logs/attempt_0/rank_{}.log", rank)));
    EXPECT_EQ(count_lines(log, fmt::format("out{} job42 trainer", rank)), 1) << log;
    EXPECT_EQ(count_lines(log, fmt::format("err{}", rank)), 1) << log;
  }
}

// --- 8. bad usage ----------------------------------------------------------------------------------

TEST(CliLauncher, BadUsageIsOneLineAndExitTwo) {
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  std::vector<Case> cases{
      {{"run", "--nnodes", "2", "--master-port", "0", "--exec", "/bin/true"}, "--master-port 0"},
      {{"run", "--master-port", "0"}, "missing the command"},
      {{"run", "--master-port", "0", "--exec"}, "--exec needs a program"},
      {{"run", "--nnodes", "2", "--node-rank", "2", "--exec", "/bin/true"}, "--node-rank must be in [0, 2)"},
      {{"run", "--master-port", "0", "--local-ranks-filter", "0,x", "--exec", "/bin/true"}, "--local-ranks-filter"},
      {{"run", "--rdzv-endpoint", "nohost", "--exec", "/bin/true"}, "--rdzv-endpoint 'nohost'"},
      {{"run", "--master-port", "0", "--exec", "/nonexistent/prog"}, "'/nonexistent/prog' is not an executable"},
      {{"run", "--master-port", "0", "--exec", "no-such-program-xyz"}, "'no-such-program-xyz' not found in PATH"},
      {{"run", "--rdzv-backend", "etcd", "--exec", "/bin/true"}, "--rdzv-backend etcd is not supported"},
      {{"run", "--standalone", "--tee", "3", "--exec", "/bin/true"}, "give --log-dir"},
      {{"run", "--standalone", "--log-dir", "/tmp", "--redirects", "7", "--exec", "/bin/true"}, "--redirects '7'"},
      {{"run", "--standalone", "--nnodes", "2", "--exec", "/bin/true"}, "--standalone runs one node"},
      // Node 0 hosting the store at another machine's address (TEST-NET-1, never assigned; only
      // a local bind() is tried, nothing is sent) used to wait out --rdzv-timeout.
      {{"run", "--master-addr", "192.0.2.1", "--master-port", "0", "--exec", "/bin/true"},
       "--master-addr 192.0.2.1, but no address it resolves to belongs to this machine"},
  };
  for (const auto& c : cases) {
    auto r = testing::run_ctitan(c.args, 30);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    auto line = last_line(r.output);
    EXPECT_EQ(line.rfind("ctitan: run: ", 0), 0u) << r.output;
    EXPECT_TRUE(contains(line, c.needle)) << "last line: " << line;
    EXPECT_EQ(lines_of(r.output).size(), 1u) << r.output;
  }
}

}  // namespace
}  // namespace ctitan
