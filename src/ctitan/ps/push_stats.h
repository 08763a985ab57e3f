#pragma once
// The server's RPC numbers between two log steps: latencies the trainers measured (a push to its
// new parameters in the gradients mode, an embedding lookup in the dist_autograd mode) and the
// payload bytes that crossed the wire.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ctitan::ps {

class PushStats {
 public:
  // `latency_name`: the fields' stem, "rpc_push_latency" -> rpc_push_latency_p50_s, ..._p99_s.
  explicit PushStats(std::string latency_name) : latency_name_(std::move(latency_name)) {}

  // A push's latency in seconds as its trainer measured it; negative values (none yet) are skipped.
  void add_latency(double seconds) {
    if (seconds >= 0) latencies_.push_back(seconds);
  }
  // Tensor payload bytes received (gradients) and sent (parameters) in one round.
  void add_bytes(int64_t bytes) { bytes_ += bytes; }
  int64_t total_bytes() const { return total_bytes_ + bytes_; }

  // The metrics.jsonl fields of the window since the last call, then starts a new window:
  // <latency_name>_p50_s, <latency_name>_p99_s (NaN without samples), rpc_bytes_per_step.
  std::vector<std::pair<std::string, double>> take_fields(int64_t steps);

 private:
  std::string latency_name_;
  std::vector<double> latencies_;
  int64_t bytes_ = 0, total_bytes_ = 0;
};

// The q-quantile (0..1) of `values` by the nearest-rank method; NaN when empty. Reorders `values`.
double quantile(std::vector<double>& values, double q);

}  // namespace ctitan::ps
