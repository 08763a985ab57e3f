// Timeouts on libtorch 2.x: Communicator::set_timeout reaches the transport (c10d
// Backend::setTimeout), so a timeout can be extended after the group was created, not only
// shortened as with libtorch 1.13's Gloo. Two ranks are two threads sharing an in-memory store,
// as c10d's own C++ tests run Gloo.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <thread>

#include "ctitan/distributed/communicator.h"

namespace ctitan::distributed {
namespace {

// Runs fn(rank) on two threads; returns the first exception's message, or "".
std::string on_two_ranks(const std::function<void(int)>& fn) {
  std::string error;
  std::mutex mutex;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        if (error.empty()) error = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  return error;
}

// Created with a 1 s timeout, extended to 30 s: rank 0 arriving 2.5 s late is then no error.
// With Gloo's own timeout left at 1 s, rank 1's all_reduce would fail after 1 s.
TEST(CommunicatorTimeout, SetTimeoutExtendsGloosOwnTimeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<float> results(2, 0);
  auto error = on_two_ranks([&](int rank) {
    auto comm = Communicator::create(store, "extend", rank, 2, std::chrono::seconds(1), "127.0.0.1");
    comm->set_timeout(std::chrono::seconds(30));
    EXPECT_EQ(comm->timeout(), std::chrono::seconds(30));
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    auto t = torch::full({4}, float(rank + 1));
    comm->all_reduce(t, ReduceOp::kSum);
    results[size_t(rank)] = t[0].item<float>();
  });
  EXPECT_EQ(error, "");
  EXPECT_EQ(results, std::vector<float>({3, 3}));
}

// The other direction still holds: shortened to 1 s, a peer 3 s late is a one-line timeout on the
// rank that waited, naming the collective.
TEST(CommunicatorTimeout, SetTimeoutShortensIt) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::string waited_error;
  on_two_ranks([&](int rank) {
    auto comm = Communicator::create(store, "shorten", rank, 2, std::chrono::seconds(30), "127.0.0.1");
    comm->set_timeout(std::chrono::seconds(1));
    auto t = torch::ones({4});
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      try {
        comm->all_reduce(t, ReduceOp::kSum);
      } catch (const CommError&) {
        // Rank 1 gave up and failed its group; whatever rank 0 sees now is not the point here.
      }
      return;
    }
    try {
      comm->all_reduce(t, ReduceOp::kSum);
    } catch (const CommError& e) {
      waited_error = e.what();
    }
  });
  EXPECT_NE(waited_error.find("collective timeout: all_reduce #1 on group 'shorten' (rank 1 of 2"), std::string::npos)
      << waited_error;
}

}  // namespace
}  // namespace ctitan::distributed
