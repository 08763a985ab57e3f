// Every collective x dtype x op x size, sync and async, on 2, 3 and 4 ranks (threads over an
// in-memory store), against values each rank computes for every other rank. Inputs are small
// integers, exact in every dtype, so SUM and MAX must match exactly and moves bit for bit; only
// AVG rounds (collective_reference.h argues its tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/wire_format.h"
#include "distributed/collective_reference.h"
#include "support/thread_ranks.h"

namespace ctitan::distributed {
namespace {

using namespace testref;

constexpr auto kConnectTimeout = std::chrono::seconds(60);

// Runs body(world, failures) on each of `n` thread ranks of a fresh group; returns every rank's
// failed checks and exceptions, "" when all passed.
std::string on_world(int n, const std::function<void(Communicator&, Failures&)>& body,
                     c10::intrusive_ptr<c10d::Store> store = testing::in_memory_store()) {
  std::vector<std::string> failed(static_cast<size_t>(n), std::string());
  auto errors = testing::on_thread_ranks(n, [&](int rank) {
    auto world = Communicator::create(store, "world", rank, n, kConnectTimeout, "127.0.0.1");
    Failures failures;
    body(*world, failures);
    failed[size_t(rank)] = failures.text();
  });
  for (size_t r = 0; r < errors.size(); ++r) errors[r] += failed[r];
  return testing::rank_errors(errors);
}

std::string label(torch::ScalarType dtype, const char* op, int64_t n, bool async_op) {
  return fmt::format("{}{}{} n={} {}", dtype_name(dtype), op ? " " : "", op ? op : "", n,
                     async_op ? "async" : "sync");
}

// Issued collectives and what to check once each completed. Async mode keeps every size in flight
// at once and waits in reverse order: concurrent collectives must not mix.
struct Pending {
  std::shared_ptr<Work> work;
  std::function<void()> check;
};
void wait_and_check(std::vector<Pending>& pending, bool async_op) {
  if (async_op) std::reverse(pending.begin(), pending.end());
  for (auto& p : pending) {
    p.work->wait();
    p.check();
  }
}

const std::vector<std::pair<ReduceOp, const char*>> kOps = {
    {ReduceOp::kSum, "sum"}, {ReduceOp::kAvg, "avg"}, {ReduceOp::kMax, "max"}};

// all_reduce (scatter = false) or reduce_scatter_tensor (true) of one dtype, every op and size.
void check_reductions(Communicator& comm, torch::ScalarType dtype, bool scatter, Failures& f) {
  const int N = comm.size(), r = comm.rank();
  for (auto [op, op_name] : kOps) {
    for (bool async_op : {false, true}) {
      if (op == ReduceOp::kAvg && !torch::isFloatingType(dtype)) {  // documented: a CommError, not a truncation
        auto t = small_ints(r, N, dtype, 0);
        bool threw = false;
        try {
          scatter ? comm.reduce_scatter_tensor(t.narrow(0, 0, 1), t, op, async_op) : comm.all_reduce(t, op, async_op);
        } catch (const CommError&) {
          threw = true;
        }
        f.expect(label(dtype, op_name, N, async_op), threw ? std::nullopt : std::optional<std::string>("no CommError"));
        continue;
      }
      std::vector<Pending> pending;
      int salt = 0;
      for (int64_t n : sizes_for(dtype, scatter ? N : 1)) {
        ++salt;
        // Rank r's result: the reduction over ranks of their inputs' slice r (reduce_scatter) or
        // of their whole inputs (all_reduce).
        std::vector<torch::Tensor> slices;
        for (int j = 0; j < N; ++j) slices.push_back(small_ints(j, n, dtype, salt, scatter ? r * n : 0));
        auto expected = reduce_reference(slices, op);
        auto input = scatter ? small_ints(r, N * n, dtype, salt) : slices[size_t(r)];
        auto out = scatter ? torch::empty({n}, input.options()) : input.clone();
        auto work = scatter ? comm.reduce_scatter_tensor(out, input, op, async_op) : comm.all_reduce(out, op, async_op);
        double rtol = op == ReduceOp::kAvg ? avg_rtol(dtype) : 0;
        auto what = label(dtype, op_name, n, async_op);
        pending.push_back({work, [&f, out, expected, rtol, what] { f.expect(what, mismatch(out, expected, rtol)); }});
      }
      wait_and_check(pending, async_op);
    }
  }
}

// all_gather_into_tensor (gather = true) or broadcast of one dtype, every size; every rank gets to
// be the broadcast root.
void check_moves(Communicator& comm, torch::ScalarType dtype, bool gather, Failures& f) {
  const int N = comm.size(), r = comm.rank();
  int root = 0;
  for (bool async_op : {false, true}) {
    std::vector<Pending> pending;
    int salt = 0;
    for (int64_t n : sizes_for(dtype, gather ? N : 1)) {
      ++salt;
      root = (root + 1) % N;
      torch::Tensor out, expected;
      std::shared_ptr<Work> work;
      if (gather) {
        std::vector<torch::Tensor> all;
        for (int j = 0; j < N; ++j) all.push_back(busy_bits(j, n, dtype, salt));
        expected = torch::cat(all);
        out = torch::zeros({N * n}, expected.options());
        work = comm.all_gather_into_tensor(out, all[size_t(r)], async_op);
      } else {
        expected = busy_bits(root, n, dtype, salt);
        out = r == root ? expected.clone() : torch::zeros_like(expected);
        work = comm.broadcast(out, root, async_op);
      }
      auto what = label(dtype, nullptr, n, async_op) + (gather ? "" : fmt::format(" root={}", root));
      pending.push_back({work, [&f, out, expected, what] { f.expect(what, bit_mismatch(out, expected)); }});
    }
    wait_and_check(pending, async_op);
  }
}

// body(world, failures) on 2, 3 and 4 ranks: every check passes on each.
void expect_passes_on_2_3_and_4_ranks(const std::function<void(Communicator&, Failures&)>& body) {
  for (int n : {2, 3, 4}) EXPECT_EQ(on_world(n, body), "") << n << " ranks";
}

class CollectivesByDtype : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(CollectivesByDtype, AllReduce) {
  expect_passes_on_2_3_and_4_ranks([&](Communicator& c, Failures& f) { check_reductions(c, GetParam(), false, f); });
}

TEST_P(CollectivesByDtype, ReduceScatterTensor) {
  expect_passes_on_2_3_and_4_ranks([&](Communicator& c, Failures& f) { check_reductions(c, GetParam(), true, f); });
}

TEST_P(CollectivesByDtype, AllGatherIntoTensor) {
  expect_passes_on_2_3_and_4_ranks([&](Communicator& c, Failures& f) { check_moves(c, GetParam(), true, f); });
}

TEST_P(CollectivesByDtype, Broadcast) {
  expect_passes_on_2_3_and_4_ranks([&](Communicator& c, Failures& f) { check_moves(c, GetParam(), false, f); });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CollectivesByDtype,
                         ::testing::Values(torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kHalf, torch::kLong,
                                           torch::kInt),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Uneven all-to-all over rows (expert parallelism's dispatch): rank r sends splits[r][j] rows to
// rank j, each row filled with 1000 r + 10 j + its index in the block (rounded to bf16 where it
// is bf16: the move is bit for bit), sync and async; one case where rank 2 receives no row and
// one where rank 0 sends none.
TEST(Collectives, AllToAllSingleMovesUnevenRowBlocks) {
  for (const auto& splits : std::vector<std::vector<std::vector<int64_t>>>{
           {{0, 2, 1}, {1, 0, 2}, {2, 1, 3}}, {{1, 3, 0}, {2, 1, 0}, {1, 1, 0}}, {{0, 0, 0}, {2, 1, 1}, {1, 0, 2}}}) {
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      for (bool async_op : {false, true}) {
        EXPECT_EQ(on_world(3, [&](Communicator& comm, Failures& f) {
          const int r = comm.rank();
          std::vector<int64_t> in_splits = splits[size_t(r)], out_splits;
          for (int j = 0; j < 3; ++j) out_splits.push_back(splits[size_t(j)][size_t(r)]);
          const auto block = [&](int from, int to, int64_t rows) {  // (rows, 4)
            return (1000.0 * from + 10.0 * to + torch::arange(rows, torch::kFloat)).unsqueeze(1).expand({rows, 4});
          };
          std::vector<torch::Tensor> sent, expected;
          for (int j = 0; j < 3; ++j) sent.push_back(block(r, j, in_splits[size_t(j)]));
          for (int j = 0; j < 3; ++j) expected.push_back(block(j, r, out_splits[size_t(j)]));
          auto input = torch::cat(sent).to(dtype).contiguous();
          auto output = torch::full({torch::cat(expected).size(0), 4}, -1.0, torch::TensorOptions(dtype));
          comm.all_to_all_single(output, input, out_splits, in_splits, async_op)->wait();
          const bool equal = torch::equal(output, torch::cat(expected).to(dtype));  // the values as the dtype holds them
          f.expect(label(dtype, "all_to_all", input.size(0), async_op),
                   equal ? std::nullopt : std::optional<std::string>("rows differ from the senders' blocks"));
        }), "");
      }
    }
  }
}

// FSDP's use: a flat buffer of m elements (not a multiple of N) padded, reduce-scattered, then
// all-gathered back: the first m elements must equal the all_reduce and the padding stays zero.
TEST(Collectives, PaddedReduceScatterThenAllGatherRoundTrips) {
  for (int N : {2, 3, 4}) {
    auto failures = on_world(N, [&](Communicator& comm, Failures& f) {
      for (int64_t m : {1, 7, 1001, 10007}) {
        std::vector<torch::Tensor> inputs;
        for (int j = 0; j < N; ++j) inputs.push_back(small_ints(j, m, torch::kFloat, int(m)));
        auto padded = pad_for_sharding(inputs[size_t(comm.rank())], N);
        int64_t n = padded_shard_numel(m, N);
        auto shard = torch::empty({n});
        comm.reduce_scatter_tensor(shard, padded, ReduceOp::kSum);
        auto full = torch::empty({N * n});
        comm.all_gather_into_tensor(full, shard);
        auto what = fmt::format("m={} padded to {}", m, N * n);
        f.expect(what, mismatch(full.narrow(0, 0, m), reduce_reference(inputs, ReduceOp::kSum), 0));
        f.expect(what + " tail", mismatch(full.narrow(0, m, N * n - m), torch::zeros({N * n - m}), 0));
        int64_t valid = 0;
        for (int j = 0; j < N; ++j) valid += valid_shard_numel(m, N, j);
        f.expect(what + " valid_shard_numel", valid == m ? std::nullopt : std::optional<std::string>("shards do not add up"));
      }
    });
    EXPECT_EQ(failures, "") << N << " ranks";
  }
}

// A Work holds its tensors until wait(), and nothing after it: once the caller drops them, the
// storage is freed at once (no recordStream-style deferred release).
TEST(Collectives, WorkHoldsItsBuffersUntilWaitAndNoLonger) {
  auto failures = on_world(3, [](Communicator& comm, Failures& f) {
    const int N = comm.size();
    using Issue = std::function<std::shared_ptr<Work>(torch::Tensor&, torch::Tensor&)>;
    const std::vector<std::tuple<const char*, bool, Issue>> cases = {
        // name, works on `out` alone (in place), issue
        {"all_reduce", true, [&](torch::Tensor& out, torch::Tensor&) { return comm.all_reduce(out, ReduceOp::kAvg, true); }},
        {"all_reduce bf16", true, [&](torch::Tensor& out, torch::Tensor&) {
           out = out.to(torch::kBFloat16);
           return comm.all_reduce(out, ReduceOp::kSum, true);
         }},
        {"broadcast", true, [&](torch::Tensor& out, torch::Tensor&) { return comm.broadcast(out, N - 1, true); }},
        {"all_gather", false, [&](torch::Tensor& out, torch::Tensor& in) { return comm.all_gather_into_tensor(out, in, true); }},
        {"reduce_scatter", false, [&](torch::Tensor& out, torch::Tensor& in) {
           std::swap(out, in);  // the big one is the input here
           return comm.reduce_scatter_tensor(out, in, ReduceOp::kSum, true);
         }},
    };
    for (const auto& [name, in_place, issue] : cases) {
      auto in = torch::ones({1 << 16});
      auto out = torch::zeros({N << 16});
      auto work = issue(out, in);
      bool held = out.use_count() > 1 && (in_place || in.use_count() > 1);
      work->wait();
      bool released = out.use_count() == 1 && in.use_count() == 1;
      auto weak_out = out.storage().getWeakStorageImpl();
      auto weak_in = in.storage().getWeakStorageImpl();
      out.reset();
      in.reset();
      bool freed = weak_out.expired() && weak_in.expired();
      f.expect(name, held && released && freed
                         ? std::nullopt
                         : std::optional<std::string>(fmt::format(
                               "held before wait: {}, released by wait: {}, storage freed: {}", held, released, freed)));
    }
  });
  EXPECT_EQ(failures, "");
}

// Groups of 2 over the same store ("pair0" = ranks 0 and 1, "pair1" = ranks 2 and 3) run their
// own collectives while a world all_reduce is in flight: groups sharing a store must not mix up
// their traffic.
TEST(Collectives, SubGroupsDoNotMixWithAnInFlightWorldCollective) {
  auto store = testing::in_memory_store();
  auto failures = on_world(4, [&](Communicator& world, Failures& f) {
    const int N = world.size(), r = world.rank();
    std::vector<torch::Tensor> all;
    for (int j = 0; j < N; ++j) all.push_back(small_ints(j, 100003, torch::kFloat, 99));
    auto in_flight = all[size_t(r)].clone();
    auto work = world.all_reduce(in_flight, ReduceOp::kSum, /*async_op=*/true);
    auto pair = Communicator::create(store, fmt::format("pair{}", r / 2), r % 2, 2, kConnectTimeout, "127.0.0.1");
    check_reductions(*pair, torch::kFloat, false, f);
    check_reductions(*pair, torch::kBFloat16, true, f);
    check_moves(*pair, torch::kLong, true, f);
    work->wait();
    f.expect("world all_reduce during the pair checks", mismatch(in_flight, reduce_reference(all, ReduceOp::kSum), 0));
  }, store);
  EXPECT_EQ(failures, "");
}

// Counters: calls and logical payload bytes per collective type (the full N * n buffer for
// all_gather and reduce_scatter), blocked time, and the sequence number that error messages cite.
TEST(Collectives, StatsCountCallsBytesAndSequenceNumbers) {
  auto failures = on_world(2, [](Communicator& comm, Failures& f) {
    auto t = torch::ones({10});
    comm.all_reduce(t, ReduceOp::kSum);
    comm.all_reduce(t, ReduceOp::kMax);
    comm.broadcast(t, 1);
    auto shard = torch::ones({5}, torch::kDouble);
    auto full = torch::zeros({10}, torch::kDouble);
    comm.all_gather_into_tensor(full, shard);
    comm.reduce_scatter_tensor(shard, full, ReduceOp::kSum);
    comm.barrier();
    auto stats = comm.stats();
    auto expect_counts = [&](const std::string& key, int64_t calls, int64_t bytes) {
      auto s = stats[key];
      f.expect(key, s.calls == calls && s.bytes == bytes && s.seconds > 0
                        ? std::nullopt
                        : std::optional<std::string>(fmt::format("{} calls, {} bytes, {} s", s.calls, s.bytes, s.seconds)));
    };
    expect_counts("all_reduce", 2, 2 * 40);
    expect_counts("broadcast", 1, 40);
    expect_counts("all_gather", 1, 80);
    expect_counts("reduce_scatter", 1, 80);
    f.expect("keys", stats.size() == 5 ? std::nullopt : std::optional<std::string>(fmt::format("{} keys", stats.size())));
    f.expect("sequence", comm.sequence_number() == 6
                             ? std::nullopt
                             : std::optional<std::string>(fmt::format("sequence number {}", comm.sequence_number())));
  });
  EXPECT_EQ(failures, "");
}

}  // namespace
}  // namespace ctitan::distributed
