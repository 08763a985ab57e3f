#include "ctitan/ps/push_stats.h"

#include <algorithm>
#include <cmath>

namespace ctitan::ps {

double quantile(std::vector<double>& values, double q) {
  if (values.empty()) return NAN;
  // Nearest rank: the smallest value with at least q of the samples at or below it.
  const auto rank = size_t(std::max(1.0, std::ceil(q * double(values.size())))) - 1;
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(rank), values.end());
  return values[rank];
}

std::vector<std::pair<std::string, double>> PushStats::take_fields(int64_t steps) {
  std::vector<std::pair<std::string, double>> fields = {
      {latency_name_ + "_p50_s", quantile(latencies_, 0.5)},
      {latency_name_ + "_p99_s", quantile(latencies_, 0.99)},
      {"rpc_bytes_per_step", double(bytes_) / double(std::max<int64_t>(steps, 1))},
  };
  latencies_.clear();
  total_bytes_ += bytes_;
  bytes_ = 0;
  return fields;
}

}  // namespace ctitan::ps
