// bench/rpc_bench: ctitan's RPC (src/ctitan/rpc/) on one machine, the C++ half of bench/rpc.py,
// which runs bench/rpc_torch.py (PyTorch's torch.distributed.rpc) with the same cases, counts and
// options and prints the ratios. Start it on every rank:
//   ctitan run --nproc-per-node 2 --master-port 0 --exec build/bin/rpc_bench --mode p2p
//   ctitan run --nproc-per-node 1+T --master-port 0 --exec build/bin/rpc_bench --mode ps
// Rank 0 prints one JSON line per case ({"rpc_bench": ...}); the launcher prefixes it "[rank0]:".
//   --mode p2p   (2 workers) worker0 calls worker1: round-trip latency (p50, p99) of a no-op call
//                and of a 1 MB fp32 tensor echo, each call timed alone (rpc_sync); then calls per
//                second of no-op rpc_async calls with K outstanding (a FIFO window: wait for the
//                oldest, issue the next), for each K of --outstanding.
//   --mode ps    (1 server + T trainers) the batched parameter server of PyTorch's "batch RPC with
//                async execution" tutorial: each trainer pushes one gradient of --numel fp32 to the
//                server's asynchronous function "ps_push" and waits; the server keeps it in the
//                trainer's slot and returns the round's shared future; the push that fills the last
//                slot sums the slots in rank order, applies p -= lr * sum / T, and completes that
//                future with p, which answers every trainer. Trainers compute nothing: the round is
//                RPC plus the server's update. Rounds per second are timed on the server, between
//                the completions of the last warm-up round and of the last round.
// Options: --calls N (timed calls per latency/throughput case), --warmup N (untimed calls before
// each), --outstanding 1,4,16, --rounds N, --warmup-rounds N, --numel N (default 6163712, the debug
// model's parameter count), --threads N (the agent's pool, as PyTorch's num_worker_threads).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/common/threads.h"
#include "ctitan/distributed/dist_env.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/registry.h"

namespace rpc = ctitan::rpc;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string mode;
  int calls = 2000, warmup = 200;
  std::vector<int> outstanding = {1, 4, 16};
  int rounds = 20, warmup_rounds = 3;
  int64_t numel = 6163712;  // debugmodel: 6 blocks of dim 256, vocab 2048
  int threads = 16;
};

Args parse_args(int argc, char** argv) {
  Args a;
  auto number = [](const std::string& flag, const char* text) {
    char* end = nullptr;
    long long v = std::strtoll(text, &end, 10);
    if (*end != '\0' || v < 1) throw ctitan::InputError(fmt::format("rpc_bench: {} must be a positive integer (got '{}')", flag, text), 2);
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw ctitan::InputError(fmt::format("rpc_bench: {} needs a value", flag), 2);
    const char* value = argv[++i];
    if (flag == "--mode") a.mode = value;
    else if (flag == "--calls") a.calls = int(number(flag, value));
    else if (flag == "--warmup") a.warmup = int(number(flag, value));
    else if (flag == "--rounds") a.rounds = int(number(flag, value));
    else if (flag == "--warmup-rounds") a.warmup_rounds = int(number(flag, value));
    else if (flag == "--numel") a.numel = number(flag, value);
    else if (flag == "--threads") a.threads = int(number(flag, value));
    else if (flag == "--outstanding") {
      a.outstanding.clear();
      std::stringstream in(value);
      for (std::string item; std::getline(in, item, ',');) a.outstanding.push_back(int(number(flag, item.c_str())));
    } else {
      throw ctitan::InputError(fmt::format("rpc_bench: unknown option {}", flag), 2);
    }
  }
  if (a.mode != "p2p" && a.mode != "ps") throw ctitan::InputError("rpc_bench: --mode must be p2p or ps", 2);
  return a;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The q-quantile of `us` (sorted in place), nearest rank: the value below which a share q of
// the samples fall.
double quantile(std::vector<double>& us, double q) {
  std::sort(us.begin(), us.end());
  size_t i = std::min(us.size() - 1, size_t(q * double(us.size())));
  return us[i];
}

// --- p2p: worker0 calls worker1 ------------------------------------------------------------------

void latency(const std::string& name, int calls, int warmup, const std::function<void()>& call) {
  std::vector<double> us;
  us.reserve(size_t(calls));
  for (int i = 0; i < warmup + calls; ++i) {
    auto start = Clock::now();
    call();
    if (i >= warmup) us.push_back(seconds_since(start) * 1e6);
  }
  double p50 = quantile(us, 0.50), p99 = quantile(us, 0.99);
  fmt::print("{{\"rpc_bench\": \"latency\", \"payload\": \"{}\", \"p50_us\": {:.1f}, \"p99_us\": {:.1f}, "
             "\"calls\": {}}}\n",
             name, p50, p99, calls);
  std::fflush(stdout);
}

// No-op rpc_async calls with `window` outstanding: the oldest is waited for before the next goes out.
void throughput(int window, int calls, int warmup) {
  std::deque<rpc::Future> pending;
  Clock::time_point start;
  for (int i = 0; i < warmup + calls; ++i) {
    if (i == warmup) {
      // Timing starts with an empty window, as it ends with one.
      while (!pending.empty()) {
        pending.front().wait();
        pending.pop_front();
      }
      start = Clock::now();
    }
    if (int(pending.size()) == window) {
      pending.front().wait();
      pending.pop_front();
    }
    pending.push_back(rpc::rpc_async("worker1", "noop"));
  }
  while (!pending.empty()) {
    pending.front().wait();
    pending.pop_front();
  }
  double s = seconds_since(start);
  fmt::print("{{\"rpc_bench\": \"throughput\", \"outstanding\": {}, \"calls_per_s\": {:.1f}, \"calls\": {}}}\n",
             window, calls / s, calls);
  std::fflush(stdout);
}

void run_p2p(const Args& a, int rank) {
  if (rank != 0) return;  // worker1 serves from the agent's pool until shutdown
  latency("noop", a.calls, a.warmup, [] { rpc::rpc_sync("worker1", "noop"); });
  // 1 MB: 262144 fp32. Fewer calls than the no-op: each moves 2 MB.
  const at::Tensor mb = at::rand({262144});
  latency("echo_1mb", std::max(1, a.calls / 2), std::max(1, a.warmup / 2),
          [&] { rpc::rpc_sync("worker1", "echo", mb); });
  for (int window : a.outstanding) throughput(window, a.calls, a.warmup);
}

// --- ps: the batched parameter server --------------------------------------------------------------

struct Server {
  std::mutex mutex;
  std::condition_variable finished;
  int trainers = 0;
  int rounds_total = 0;
  at::Tensor param;                  // (numel,) fp32
  std::vector<at::Tensor> slots;     // one gradient per trainer, index rank - 1
  int arrived = 0;
  rpc::Future round;                 // completed with `param` when the round's last push arrives
  int rounds_done = 0;
  std::vector<Clock::time_point> completed_at;  // per round
  double update_s = 0;                          // summed over the timed rounds
  int warmup_rounds = 0;
};

Server& server() {
  static Server s;
  return s;
}

constexpr double kLr = 0.01;

rpc::Future ps_push(int64_t trainer, const at::Tensor& grad) {
  Server& s = server();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (trainer < 1 || trainer > s.trainers || s.slots[size_t(trainer - 1)].defined()) {
    throw std::runtime_error(fmt::format("ps_push: trainer {} pushed twice in round {}", trainer, s.rounds_done));
  }
  s.slots[size_t(trainer - 1)] = grad;
  rpc::Future mine = s.round;
  if (++s.arrived == s.trainers) {
    auto start = Clock::now();
    at::Tensor total = s.slots[0].clone();
    for (int t = 1; t < s.trainers; ++t) total.add_(s.slots[size_t(t)]);
    s.param.add_(total, -kLr / s.trainers);
    if (s.rounds_done >= s.warmup_rounds) s.update_s += seconds_since(start);
    for (auto& slot : s.slots) slot = at::Tensor();
    s.arrived = 0;
    s.round = rpc::Future();
    s.completed_at.push_back(Clock::now());
    ++s.rounds_done;
    // `param` itself, not a copy: the next update waits for every trainer's next push, which each
    // makes only after its reply (these bytes) has fully arrived.
    mine.set_value(s.param);
    if (s.rounds_done == s.rounds_total) s.finished.notify_all();
  }
  return mine;
}

void run_ps(const Args& a, int rank, int world_size) {
  const int trainers = world_size - 1;
  const int total = a.warmup_rounds + a.rounds;
  if (rank != 0) {
    const at::Tensor grad = at::full({a.numel}, 1e-3f * float(rank));
    at::Tensor param;
    for (int r = 0; r < total; ++r) param = rpc::rpc_async("worker0", "ps_push", int64_t(rank), grad).value_as<at::Tensor>();
    return;
  }
  Server& s = server();
  std::unique_lock<std::mutex> lock(s.mutex);
  s.finished.wait(lock, [&] { return s.rounds_done == s.rounds_total; });
  const double timed = std::chrono::duration<double>(s.completed_at[size_t(total - 1)] -
                                                     s.completed_at[size_t(a.warmup_rounds - 1)])
                           .count();
  fmt::print("{{\"rpc_bench\": \"ps\", \"trainers\": {}, \"rounds_per_s\": {:.2f}, \"update_ms\": {:.2f}, "
             "\"rounds\": {}, \"numel\": {}}}\n",
             trainers, a.rounds / timed, 1e3 * s.update_s / a.rounds, a.rounds, a.numel);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse_args(argc, argv);
    ctitan::configure_threads();
    auto env = ctitan::distributed::read_dist_env();
    if (a.mode == "p2p" && env.world_size != 2) throw ctitan::InputError("rpc_bench: --mode p2p runs on 2 workers", 2);
    if (a.mode == "ps" && env.world_size < 2) throw ctitan::InputError("rpc_bench: --mode ps needs 2 or more workers", 2);
    if (a.mode == "ps" && a.warmup_rounds < 1) throw ctitan::InputError("rpc_bench: --warmup-rounds must be >= 1", 2);

    rpc::register_function("noop", [] {});
    rpc::register_function("echo", [](const at::Tensor& t) { return t; });
    rpc::register_function("ps_push", ps_push);
    if (a.mode == "ps" && env.rank == 0) {
      Server& s = server();
      s.trainers = env.world_size - 1;
      s.rounds_total = a.warmup_rounds + a.rounds;
      s.warmup_rounds = a.warmup_rounds;
      s.param = at::zeros({a.numel});
      s.slots.resize(size_t(s.trainers));
    }
    rpc::RpcOptions options;
    options.num_worker_threads = a.threads;
    rpc::init_rpc("worker" + std::to_string(env.rank), options);
    if (a.mode == "p2p") {
      run_p2p(a, env.rank);
    } else {
      run_ps(a, env.rank, env.world_size);
    }
    rpc::shutdown();
    return 0;
  } catch (const ctitan::InputError& e) {
    fmt::print(stderr, "{}\n", e.what());
    std::fflush(stderr);
    std::_Exit(e.exit_code());
  } catch (const std::exception& e) {
    fmt::print(stderr, "rpc_bench: {}\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);  // no graceful shutdown: the launcher stops the peers
  }
}
