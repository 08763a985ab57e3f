#pragma once
// Per-collective-type counters of a Communicator: how many calls, how many payload bytes, and how
// long the caller was blocked (inside the call plus inside Work::wait()).
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace ctitan::distributed {

struct CollectiveStats {
  int64_t calls = 0;
  // Logical payload, not wire bytes: the tensor for all_reduce/broadcast, the full (size() * n)
  // buffer for all_gather/reduce_scatter, the same convention as nccl-tests' "size".
  int64_t bytes = 0;
  double seconds = 0;  // caller blocked in the call + wait(); overlapped time is not counted
};

// Thread-safe accumulator shared by a Communicator and the Work handles it issued.
class StatsTable {
 public:
  void add_call(const std::string& key, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = table_[key];
    s.calls += 1;
    s.bytes += bytes;
  }
  void add_seconds(const std::string& key, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    table_[key].seconds += seconds;
  }
  std::map<std::string, CollectiveStats> snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return table_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, CollectiveStats> table_;
};

}  // namespace ctitan::distributed
