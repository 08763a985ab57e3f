// `ctitan selftest collectives [--timeout-test [--timeout-seconds S]]`: run under a launcher (or
// RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT by hand). Checks every collective x dtype x op x size,
// sync and async, against values each rank computes locally for every other rank; prints one line
// per check group (rank 0) and exits 0 only if every rank passed. With --timeout-test, rank 0
// skips a collective and the others must fail with the timeout CommError, not hang.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <thread>

#include "ctitan/cli/commands.h"
#include "ctitan/common/error.h"
#include "ctitan/common/threads.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/store.h"
#include "ctitan/distributed/wire_format.h"

namespace ctitan::cli {
namespace {

using distributed::Communicator;
using distributed::ReduceOp;
using distributed::Work;
using Clock = std::chrono::steady_clock;

const std::vector<torch::ScalarType> kDtypes = {torch::kFloat, torch::kDouble, torch::kBFloat16,
                                                torch::kHalf,  torch::kLong,   torch::kInt};
const std::vector<std::pair<ReduceOp, const char*>> kOps = {
    {ReduceOp::kSum, "sum"}, {ReduceOp::kAvg, "avg"}, {ReduceOp::kMax, "max"}};

// n = 1, 7, 1001 and one n for which the full buffer (n, or N * n for all_gather and
// reduce_scatter, whose big side is N * n) is ~4 MB. All odd.
std::vector<int64_t> sizes_for(torch::ScalarType dtype, int64_t buffers_per_n = 1) {
  int64_t big = (int64_t(4) << 20) / int64_t(c10::elementSize(dtype)) / buffers_per_n;
  return {1, 7, 1001, big | 1};
}

// Rank r's input for reductions: integers in [-14, 14], exact in every dtype, and so are their
// sums over up to 18 ranks (bf16 holds integers exactly up to 256): SUM and MAX are compared
// exactly; only AVG rounds.
// Elements [start, start + n) of it.
torch::Tensor small_ints(int rank, int64_t n, torch::ScalarType dtype, int salt, int64_t start = 0) {
  auto i = torch::arange(start, start + n, torch::kLong);  // int64: N * n may exceed int32 / 11
  return ((i * 11 + rank * 37 + salt * 5) % 29 - 14).to(dtype);
}

// Rank r's input for pure moves: values with busy mantissas, compared bit for bit.
torch::Tensor busy_bits(int rank, int64_t n, torch::ScalarType dtype, int salt) {
  auto i = torch::arange(n, torch::kDouble);
  if (torch::isFloatingType(dtype)) return ((i * 0.37 + rank * 1.3 + salt).sin() * 100).to(dtype);
  return ((torch::arange(n, torch::kLong) * 7919 + rank * 104729 + salt * 31) % 2000003 - 1000001).to(dtype);
}

// Twice the unit roundoff: AVG's result is rounded once in fp32 and once into the dtype.
double avg_rtol(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16: return 1.0 / 128;
    case torch::kHalf: return 1.0 / 1024;
    case torch::kFloat: return 1.2e-7;
    default: return 2.3e-16;
  }
}

torch::Tensor reference(const std::vector<torch::Tensor>& per_rank, ReduceOp op) {
  auto stacked = torch::stack(per_rank).to(torch::kDouble);
  if (op == ReduceOp::kMax) return std::get<0>(stacked.max(0));
  auto sum = stacked.sum(0);
  return op == ReduceOp::kAvg ? sum / double(per_rank.size()) : sum;
}

// Empty when equal; else "first mismatch at index i: got g, expected e".
std::optional<std::string> mismatch(const torch::Tensor& got, const torch::Tensor& expected, double rtol) {
  auto g = got.reshape({-1}).to(torch::kDouble), e = expected.reshape({-1}).to(torch::kDouble);
  auto bad = rtol == 0 ? g.ne(e) : (g - e).abs().gt(e.abs() * rtol);
  if (!bad.any().item<bool>()) return std::nullopt;
  int64_t i = bad.nonzero()[0][0].item<int64_t>();
  return fmt::format("first mismatch at index {}: got {}, expected {}", i, g[i].item<double>(), e[i].item<double>());
}

std::optional<std::string> bit_mismatch(const torch::Tensor& got, const torch::Tensor& expected) {
  auto as_bits = [](const torch::Tensor& t) {
    switch (c10::elementSize(t.scalar_type())) {
      case 2: return t.view(torch::kShort);
      case 4: return t.view(torch::kInt);
      default: return t.view(torch::kLong);
    }
  };
  return mismatch(as_bits(got.reshape({-1})), as_bits(expected.reshape({-1})), 0);
}

// One check group: runs `body`, which records its checks; every rank then learns whether any
// rank failed (a MAX all_reduce), rank 0 prints the line, and a failure ends the run.
class Checker {
 public:
  explicit Checker(Communicator& world) : world_(world) {}

  void group(const std::string& name, const std::function<void()>& body) {
    current_ = name;
    checks_ = 0;
    auto start = Clock::now();
    body();
    auto flag = torch::tensor({failure_ ? 1 : 0}, torch::kInt);
    world_.all_reduce(flag, ReduceOp::kMax);
    if (flag.item<int>() == 0) {
      if (world_.rank() == 0) {
        fmt::print("selftest collectives: {:<26} ok ({} checks, {} ranks, {:.1f}s)\n", name, checks_, world_.size(),
                   std::chrono::duration<double>(Clock::now() - start).count());
      }
      std::fflush(stdout);
      return;
    }
    if (failure_) throw InputError(*failure_);
    // Exit after the failing rank, so that a launcher names it (not us) as the root cause.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    throw InputError(fmt::format("selftest collectives: check group '{}' failed on another rank", name));
  }

  // Records one check; `what` names it (collective, dtype, op, n, mode).
  void expect(const std::string& what, const std::optional<std::string>& problem) {
    ++checks_;
    if (problem && !failure_) {
      failure_ = fmt::format("selftest collectives failed: {} {} on rank {}: {}", current_, what, world_.rank(), *problem);
    }
  }

 private:
  Communicator& world_;
  std::string current_;
  int checks_ = 0;
  std::optional<std::string> failure_;
};

std::string what(torch::ScalarType dtype, const char* op, int64_t n, bool async_op) {
  return fmt::format("{}{}{} n={} {}", distributed::dtype_name(dtype), op ? " " : "", op ? op : "", n,
                     async_op ? "async" : "sync");
}

// Issues every collective of one (dtype, op) over all sizes. Async mode keeps them all in flight
// at once and waits in reverse order, which also checks that concurrent collectives do not mix.
struct Pending {
  std::shared_ptr<Work> work;
  std::function<void()> check;
};
void run_all(std::vector<Pending>& pending, bool async_op) {
  if (async_op) std::reverse(pending.begin(), pending.end());
  for (auto& p : pending) {
    p.work->wait();
    p.check();
  }
}

void check_reductions(Checker& c, Communicator& comm, bool scatter) {
  const int N = comm.size(), r = comm.rank();
  for (auto dtype : kDtypes) {
    for (auto [op, op_name] : kOps) {
      for (bool async_op : {false, true}) {
        if (op == ReduceOp::kAvg && !torch::isFloatingType(dtype)) {  // documented rejection
          auto t = small_ints(r, N, dtype, 0);
          bool threw = false;
          try {
            scatter ? comm.reduce_scatter_tensor(t.narrow(0, 0, 1), t, op, async_op) : comm.all_reduce(t, op, async_op);
          } catch (const distributed::CommError&) {
            threw = true;
          }
          c.expect(what(dtype, op_name, N, async_op), threw ? std::nullopt : std::optional<std::string>("no CommError for integer AVG"));
          continue;
        }
        std::vector<Pending> pending;
        int salt = 0;
        for (int64_t n : sizes_for(dtype, scatter ? N : 1)) {
          ++salt;
          int64_t total = scatter ? N * n : n;
          // What rank r must end up with: the reduction over ranks of their inputs' slice r
          // (reduce_scatter) or of their whole inputs (all_reduce).
          std::vector<torch::Tensor> slices;
          for (int j = 0; j < N; ++j) slices.push_back(small_ints(j, n, dtype, salt, scatter ? r * n : 0));
          auto expected = reference(slices, op);
          auto input = scatter ? small_ints(r, total, dtype, salt) : slices[r];
          auto out = scatter ? torch::empty({n}, input.options()) : input.clone();
          auto work = scatter ? comm.reduce_scatter_tensor(out, input, op, async_op) : comm.all_reduce(out, op, async_op);
          double rtol = op == ReduceOp::kAvg ? avg_rtol(dtype) : 0;
          auto label = what(dtype, op_name, n, async_op);
          pending.push_back({work, [&c, out, expected, rtol, label] { c.expect(label, mismatch(out, expected, rtol)); }});
        }
        run_all(pending, async_op);
      }
    }
  }
}

void check_moves(Checker& c, Communicator& comm, bool gather) {
  const int N = comm.size(), r = comm.rank();
  int root = 0;
  for (auto dtype : kDtypes) {
    for (bool async_op : {false, true}) {
      std::vector<Pending> pending;
      int salt = 0;
      for (int64_t n : sizes_for(dtype, gather ? N : 1)) {
        ++salt;
        root = (root + 1) % N;  // every rank gets to be the root
        torch::Tensor out, expected;
        std::shared_ptr<Work> work;
        if (gather) {
          std::vector<torch::Tensor> all;
          for (int j = 0; j < N; ++j) all.push_back(busy_bits(j, n, dtype, salt));
          expected = torch::cat(all);
          out = torch::zeros({N * n}, expected.options());
          work = comm.all_gather_into_tensor(out, all[r], async_op);
        } else {
          expected = busy_bits(root, n, dtype, salt);
          out = r == root ? expected.clone() : torch::zeros_like(expected);
          work = comm.broadcast(out, root, async_op);
        }
        auto label = what(dtype, nullptr, n, async_op) + (gather ? "" : fmt::format(" root={}", root));
        pending.push_back({work, [&c, out, expected, label] { c.expect(label, bit_mismatch(out, expected)); }});
      }
      run_all(pending, async_op);
    }
  }
}

// FSDP's use: a flat buffer of m elements (not a multiple of N) padded, reduce-scattered, then
// all-gathered back: the first m elements must equal the all_reduce, the padding stays zero.
void check_padding(Checker& c, Communicator& comm) {
  const int N = comm.size(), r = comm.rank();
  for (int64_t m : {1, 7, 1001, 10007}) {
    std::vector<torch::Tensor> inputs;
    for (int j = 0; j < N; ++j) inputs.push_back(small_ints(j, m, torch::kFloat, int(m)));
    auto padded = distributed::pad_for_sharding(inputs[r], N);
    int64_t n = distributed::padded_shard_numel(m, N);
    auto shard = torch::empty({n});
    comm.reduce_scatter_tensor(shard, padded, ReduceOp::kSum);
    auto full = torch::empty({N * n});
    comm.all_gather_into_tensor(full, shard);
    auto label = fmt::format("m={} padded to {}", m, N * n);
    c.expect(label, mismatch(full.narrow(0, 0, m), reference(inputs, ReduceOp::kSum), 0));
    c.expect(label + " tail", mismatch(full.narrow(0, m, N * n - m), torch::zeros({N * n - m}), 0));
    int64_t valid = 0;
    for (int j = 0; j < N; ++j) valid += distributed::valid_shard_numel(m, N, j);
    c.expect(label + " valid_shard_numel", valid == m ? std::nullopt : std::optional<std::string>("shards do not add up"));
  }
}

// The seed lesson: a Work holds its tensors until wait(), and nothing after it.
void check_release(Checker& c, Communicator& comm) {
  const int N = comm.size();
  using Issue = std::function<std::shared_ptr<Work>(torch::Tensor&, torch::Tensor&)>;
  std::vector<std::pair<const char*, Issue>> cases = {
      {"all_reduce", [&](torch::Tensor& out, torch::Tensor&) { return comm.all_reduce(out, ReduceOp::kAvg, true); }},
      {"all_reduce bf16", [&](torch::Tensor& out, torch::Tensor&) {
         out = out.to(torch::kBFloat16);
         return comm.all_reduce(out, ReduceOp::kSum, true);
       }},
      {"broadcast", [&](torch::Tensor& out, torch::Tensor&) { return comm.broadcast(out, N - 1, true); }},
      {"all_gather", [&](torch::Tensor& out, torch::Tensor& in) { return comm.all_gather_into_tensor(out, in, true); }},
      {"reduce_scatter", [&](torch::Tensor& out, torch::Tensor& in) {
         std::swap(out, in);  // the big one is the input here
         return comm.reduce_scatter_tensor(out, in, ReduceOp::kSum, true);
       }},
  };
  for (auto& [name, issue] : cases) {
    auto in = torch::ones({1 << 16});
    auto out = torch::zeros({N << 16});
    auto work = issue(out, in);
    // all_reduce and broadcast work on `out` alone.
    bool in_place = std::string(name).rfind("all_reduce", 0) == 0 || std::string(name) == "broadcast";
    bool held = out.use_count() > 1 && (in_place || in.use_count() > 1);
    work->wait();
    bool released = out.use_count() == 1 && in.use_count() == 1;
    auto weak_out = out.storage().getWeakStorageImpl();
    auto weak_in = in.storage().getWeakStorageImpl();
    out.reset();
    in.reset();
    bool freed = weak_out.expired() && weak_in.expired();
    c.expect(name, held && released && freed ? std::nullopt
                                             : std::optional<std::string>(fmt::format(
                                                   "held before wait: {}, released by wait: {}, storage freed: {}",
                                                   held, released, freed)));
  }
}

void run_checks(Communicator& world, const c10::intrusive_ptr<c10d::Store>& store, int global_rank) {
  Checker c(world);
  c.group("all_reduce", [&] { check_reductions(c, world, false); });
  c.group("reduce_scatter_tensor", [&] { check_reductions(c, world, true); });
  c.group("all_gather_into_tensor", [&] { check_moves(c, world, true); });
  c.group("broadcast", [&] { check_moves(c, world, false); });
  c.group("padding round trip", [&] { check_padding(c, world); });
  c.group("async buffer release", [&] { check_release(c, world); });
  if (world.size() >= 4) {
    // Groups of 2 over the same store ("pair0" = ranks 0 and 1, ...), while a world all_reduce
    // is in flight: groups sharing a store and a Gloo device must not mix up their traffic.
    c.group("sub-groups of 2", [&] {
      const int N = world.size();
      std::vector<torch::Tensor> all;
      for (int j = 0; j < N; ++j) all.push_back(small_ints(j, 100003, torch::kFloat, 99));
      auto in_flight = all[global_rank].clone();
      auto work = world.all_reduce(in_flight, ReduceOp::kSum, /*async_op=*/true);
      if (global_rank / 2 * 2 + 1 < N) {  // odd world: the last rank sits out
        auto pair = Communicator::create(store, fmt::format("pair{}", global_rank / 2), global_rank % 2, 2,
                                         world.timeout());
        check_reductions(c, *pair, false);
        check_reductions(c, *pair, true);
        check_moves(c, *pair, true);
      }
      work->wait();
      c.expect("world all_reduce during the pair checks", mismatch(in_flight, reference(all, ReduceOp::kSum), 0));
    });
  }
  c.group("stats and sequence numbers", [&] {
    auto stats = world.stats();
    bool ok = stats.size() == 4 && stats["all_reduce"].calls > 0 && stats["reduce_scatter"].bytes > 0 &&
              stats["all_gather"].seconds > 0;
    int64_t total = 0;
    for (auto& [key, s] : stats) total += s.calls;
    c.expect("stats", ok ? std::nullopt : std::optional<std::string>("missing counters"));
    c.expect("sequence", total == world.sequence_number()
                             ? std::nullopt
                             : std::optional<std::string>(fmt::format("{} calls counted, sequence number {}", total,
                                                                      world.sequence_number())));
  });
}

// Rank 0 skips one all_reduce; every other rank must get the timeout CommError within the
// deadline. Rank 0 waits until they reported it, then exits 0; the others exit 1 with the error.
void run_timeout_test(Communicator& world, const c10::intrusive_ptr<c10d::Store>& store, double seconds) {
  auto t = torch::ones({1024});
  world.all_reduce(t, ReduceOp::kSum);  // connected and working
  world.set_timeout(std::chrono::milliseconds(int64_t(seconds * 1000)));
  if (world.rank() == 0) {
    fmt::print("selftest collectives: rank 0 skips all_reduce #{} on purpose\n", world.sequence_number() + 1);
    std::fflush(stdout);
    std::vector<std::string> keys;
    for (int r = 1; r < world.size(); ++r) keys.push_back(fmt::format("selftest/timeout_seen/{}", r));
    store->wait(keys, std::chrono::milliseconds(int64_t(seconds * 1000) * 4 + 30000));
    fmt::print("selftest collectives: every other rank reported the timeout\n");
    return;
  }
  auto start = Clock::now();
  try {
    world.all_reduce(t, ReduceOp::kSum);
  } catch (const distributed::CommError&) {
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    fmt::print("selftest collectives: rank {} timed out after {:.2f}s (timeout {}s)\n", world.rank(), elapsed, seconds);
    std::fflush(stdout);
    store->set(fmt::format("selftest/timeout_seen/{}", world.rank()), std::vector<uint8_t>{1});
    throw;
  }
  throw InputError("selftest collectives: the skipped all_reduce completed; expected a timeout");
}

}  // namespace

void add_selftest_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("selftest", "Multi-process self-checks (run under `ctitan run`)");
  cmd->group("");  // hidden from --help: a tool for tests and bring-up
  cmd->require_subcommand(1);
  struct Args {
    bool timeout_test = false;
    double timeout_seconds = 3;
  };
  auto args = std::make_shared<Args>();
  add_mesh_selftest(*cmd);
  auto* coll = cmd->add_subcommand("collectives", "Check every collective against locally computed values");
  coll->add_flag("--timeout-test", args->timeout_test, "Rank 0 skips a collective; the others must time out");
  coll->add_option("--timeout-seconds", args->timeout_seconds, "Collective timeout of --timeout-test");
  coll->callback([args] {
    configure_threads();
    auto env = distributed::read_dist_env();
    auto store = distributed::connect_store(env, std::chrono::seconds(60));
    auto world = Communicator::create(store, "world", env.rank, env.world_size, std::chrono::seconds(60));
    if (args->timeout_test) {
      run_timeout_test(*world, store, args->timeout_seconds);
    } else {
      run_checks(*world, store, env.rank);
      world->barrier();
      if (env.rank == 0) fmt::print("selftest collectives: all checks passed on {} ranks\n", env.world_size);
    }
  });
}

}  // namespace ctitan::cli
