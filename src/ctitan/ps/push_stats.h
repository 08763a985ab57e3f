#pragma once
// The server's RPC numbers between two log steps: trainers' push latencies (push to new
// parameters, as each trainer measured it) and the payload bytes that crossed the wire.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ctitan::ps {

class PushStats {
 public:
  // A push's latency in seconds as its trainer measured it; negative values (none yet) are skipped.
  void add_latency(double seconds) {
    if (seconds >= 0) latencies_.push_back(seconds);
  }
  // Tensor payload bytes received (gradients) and sent (parameters) in one round.
  void add_bytes(int64_t bytes) { bytes_ += bytes; }
  int64_t total_bytes() const { return total_bytes_ + bytes_; }

  // The metrics.jsonl fields of the window since the last call, then starts a new window:
  // rpc_push_latency_p50_s, rpc_push_latency_p99_s (NaN without samples), rpc_bytes_per_step.
  std::vector<std::pair<std::string, double>> take_fields(int64_t steps);

 private:
  std::vector<double> latencies_;
  int64_t bytes_ = 0, total_bytes_ = 0;
};

// The q-quantile (0..1) of `values` by the nearest-rank method; NaN when empty. Reorders `values`.
double quantile(std::vector<double>& values, double q);

}  // namespace ctitan::ps
