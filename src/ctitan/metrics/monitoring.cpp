#include "ctitan/metrics/monitoring.h"

#include <fmt/format.h>

namespace ctitan::metrics {
namespace {

std::optional<bool> within(double value, double low, double high) {
  if (std::isnan(value)) return std::nullopt;
  return value >= low && value <= high;
}

}  // namespace

std::vector<TargetCheck> check_targets(const Monitoring& m) {
  return {
      {"memory use", m.memory_pct, "70-90%", within(m.memory_pct, 70, 90)},
      {"compute share", m.compute_pct, "> 85%", within(m.compute_pct, 85, INFINITY)},
      {"bandwidth use", m.bandwidth_use_pct, "60-80%", within(m.bandwidth_use_pct, 60, 80)},
      {"gradient sync latency", m.grad_sync_pct, "< 5%", within(m.grad_sync_pct, -INFINITY, 5)},
      {"exposed communication", m.exposed_comm_pct, "-", std::nullopt},
  };
}

std::string monitoring_table(const std::vector<TargetCheck>& checks) {
  std::string out = fmt::format("{:<24} {:>9} {:>9}  {}\n", "metric", "value", "target", "met");
  for (const auto& c : checks) {
    std::string value = std::isnan(c.value) ? "-" : fmt::format("{:.1f}%", c.value);
    std::string met = c.target == "-" ? "" : !c.met ? "not measured" : *c.met ? "yes" : "no";
    out += fmt::format("{:<24} {:>9} {:>9}  {}\n", c.name, value, c.target, met);
  }
  return out;
}

}  // namespace ctitan::metrics
