#pragma once
// Simulated ranks for collective tests: N threads in one process, each one rank of a Gloo group
// over an in-memory c10d::HashStore, as c10d's own C++ tests run ProcessGroupGloo.
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ctitan::testing {

// Runs fn(rank) on `n` threads and joins them. Returns each rank's exception message, "" for a
// rank that returned normally.
std::vector<std::string> on_thread_ranks(int n, const std::function<void(int)>& fn);

// The messages that are not "", each prefixed with its rank: "" when every rank succeeded.
std::string rank_errors(const std::vector<std::string>& per_rank);

inline c10::intrusive_ptr<c10d::Store> in_memory_store() { return c10::make_intrusive<c10d::HashStore>(); }

}  // namespace ctitan::testing
