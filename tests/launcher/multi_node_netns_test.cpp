// Multi-node on real interfaces: two hosts built as network namespaces joined by a veth pair,
// each with its own address, so that the store, the launchers' heartbeats and Gloo's traffic
// cross an interface as between two machines (on loopback nothing does). The test creates the
// namespaces and addresses itself and removes them afterwards. It needs root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN for `ip netns`); elsewhere it is skipped, saying why.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "support/parity.h"
#include "support/processes.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using testing::concat;
using Args = std::vector<std::string>;

testing::RunResult sh(const std::string& command) { return testing::run_program("/bin/sh", {"-c", command}, 30); }

// Host k (0 or 1) is namespace names[k] with interface links[k] at address addrs[k], in a /24
// of 10.0.0.0/8 chosen from this process's pid so that concurrent test binaries do not collide.
class TwoHosts {
 public:
  TwoHosts() {
    int pid = int(getpid());
    std::string subnet = fmt::format("10.{}.{}", 100 + pid % 100, (pid / 100) % 250);
    for (int k = 0; k < 2; ++k) {
      names[k] = fmt::format("ctitan-{}-h{}", pid, k);
      links[k] = fmt::format("ct{}v{}", pid % 1000000, k);  // interface names: 15 bytes at most
      addrs[k] = fmt::format("{}.{}", subnet, k + 1);
    }
    auto r = sh(fmt::format(
        "set -e; ip netns add {0}; ip netns add {1}; ip link add {2} type veth peer name {3}; "
        "ip link set {2} netns {0}; ip link set {3} netns {1}; "
        "ip -n {0} addr add {4}/24 dev {2}; ip -n {1} addr add {5}/24 dev {3}; "
        "ip -n {0} link set {2} up; ip -n {1} link set {3} up; ip -n {0} link set lo up; ip -n {1} link set lo up",
        names[0], names[1], links[0], links[1], addrs[0], addrs[1]));
    if (r.exit_code != 0) why_not = "cannot build network namespaces here (needs root with CAP_NET_ADMIN): " + r.output;
  }
  ~TwoHosts() {
    for (const auto& name : names) {
      sh(fmt::format("for p in $(ip netns pids {0} 2>/dev/null); do kill -9 $p; done; ip netns del {0} 2>/dev/null",
                     name));
    }
  }
  // `ctitan args...` on host k, Gloo bound to that host's interface (as GLOO_SOCKET_IFNAME is set
  // on real clusters), in the background.
  pid_t spawn(int k, const Args& args, const std::string& out_path) const {
    Args wrapped = {"netns", "exec", names[k], "env", "GLOO_SOCKET_IFNAME=" + links[k], CTITAN_BIN};
    return testing::spawn_program("/usr/sbin/ip", concat(wrapped, args), out_path);
  }
  // Processes still running on host k.
  std::string pids(int k) const { return sh("ip netns pids " + names[k]).output; }

  std::string names[2], links[2], addrs[2];
  std::string why_not;  // non-empty: the hosts could not be built
};

Args host_node_args(const TwoHosts& hosts, int node_rank, int port, const Args& extra) {
  return concat({"run", "--nnodes", "2", "--node-rank", std::to_string(node_rank), "--nproc-per-node", "1",
                 "--master-addr", hosts.addrs[0], "--master-port", std::to_string(port), "--rdzv-timeout", "60"},
                extra);
}

const Args kFsdpOverBothHosts = {"--parallelism.data_parallel_shard_degree", "2", "--training.local_batch_size", "2"};

TEST(CliMultiNode, FsdpAcrossTwoHostsMatchesOneProcess) {
  TwoHosts hosts;
  if (!hosts.why_not.empty()) GTEST_SKIP() << hosts.why_not;
  testing::TempDir dir;  // one dump folder for both hosts, as a shared file system would be
  int port = testing::free_port();
  auto train = concat(concat({"train"}, testing::tiny_job_args(dir.path())),
                      concat(testing::kThirtySteps, kFsdpOverBothHosts));
  pid_t node1 = hosts.spawn(1, host_node_args(hosts, 1, port, train), dir.file("node1.txt"));
  pid_t node0 = hosts.spawn(0, host_node_args(hosts, 0, port, train), dir.file("node0.txt"));
  int code0 = testing::wait_exit_or_kill(node0, 240), code1 = testing::wait_exit_or_kill(node1, 60);
  auto log0 = testing::read_file(dir.file("node0.txt"));
  ASSERT_EQ(code0, 0) << log0;
  ASSERT_EQ(code1, 0) << testing::read_file(dir.file("node1.txt"));
  // The store really was on host 0's address, and the workers really met across the veth.
  EXPECT_NE(log0.find(fmt::format("store at {}:{}", hosts.addrs[0], port)), std::string::npos) << log0;

  // One process with the same global batch (4 sequences); the bound is expect_parity's (parity.h).
  auto single = testing::run_tiny_job(1, concat(testing::kThirtySteps, {"--training.local_batch_size", "4"}));
  auto two_hosts = testing::read_jsonl(dir.file("metrics.jsonl"));
  auto d = testing::compare_runs(single, two_hosts, 30);
  EXPECT_LT(d.loss, 1e-4);
  EXPECT_LT(d.grad_norm, 1e-3);
}

// Host 1 disappears mid-run: its link goes down first (so that nothing it held is closed cleanly,
// as when a machine loses power), then its launcher is SIGKILLed. Host 0's workers are blocked in
// a collective with a peer that will never answer; its launcher must notice the silence within
// --heartbeat-timeout, name the lost node, stop its workers and exit 1, leaving nothing running.
TEST(CliMultiNode, LostHostIsNamedBySurvivor) {
  TwoHosts hosts;
  if (!hosts.why_not.empty()) GTEST_SKIP() << hosts.why_not;
  testing::TempDir dir;
  int port = testing::free_port();
  // Long enough that host 1 is lost mid-run; the collective timeout stays far above the
  // heartbeat timeout, so the launcher, not a worker, is the one that notices.
  auto train = concat(concat({"train"}, testing::tiny_job_args(dir.path())),
                      concat(kFsdpOverBothHosts, {"--training.steps", "100000", "--metrics.log_freq", "1",
                                                  "--comm.train_timeout_seconds", "600"}));
  auto heartbeat = Args{"--heartbeat-timeout", "3", "--term-timeout", "2"};
  pid_t node1 = hosts.spawn(1, host_node_args(hosts, 1, port, concat(heartbeat, train)), dir.file("node1.txt"));
  pid_t node0 = hosts.spawn(0, host_node_args(hosts, 0, port, concat(heartbeat, train)), dir.file("node0.txt"));
  // Three complete metrics rows (a row being written has no newline yet).
  auto rows_written = [&] {
    auto text = testing::read_file(dir.file("metrics.jsonl"));
    return std::count(text.begin(), text.end(), '\n');
  };
  bool training = testing::wait_until([&] { return rows_written() >= 3; }, 180);
  sh(fmt::format("ip -n {} link set {} down", hosts.names[1], hosts.links[1]));
  kill(node1, SIGKILL);
  testing::wait_exit_or_kill(node1, 10);
  int code0 = testing::wait_exit_or_kill(node0, 120);
  auto log0 = testing::read_file(dir.file("node0.txt"));
  ASSERT_TRUE(training) << log0 << "\n--- host 1:\n" << testing::read_file(dir.file("node1.txt"));
  EXPECT_EQ(code0, 1) << log0;
  EXPECT_NE(log0.find("ctitan: run failed: node 1 is lost: its launcher sent no heartbeat for 3s"), std::string::npos)
      << log0;
  EXPECT_TRUE(testing::wait_until([&] { return hosts.pids(0).empty(); }, 10)) << "left on host 0: " << hosts.pids(0);
}

}  // namespace
}  // namespace ctitan
