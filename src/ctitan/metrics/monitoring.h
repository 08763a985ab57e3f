#pragma once
// The monitoring table: the few shares that say whether a distributed run is healthy, with the
// target range of each, measured per log window on every rank and summarized at the end of a run
// as the worst rank's step-weighted mean.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace ctitan::metrics {

// Percentages of one log window (or of a whole run); NaN where there is nothing to measure
// (bandwidth use of a single process).
struct Monitoring {
  double memory_pct = NAN;         // peak live bytes / this rank's share of the device's memory
  double compute_pct = NAN;        // step time neither waiting for data nor blocked in collectives
  double exposed_comm_pct = NAN;   // step time blocked in collectives
  double bandwidth_use_pct = NAN;  // collective bytes per blocked second / the link's bandwidth
  double grad_sync_pct = NAN;      // end of backward compute -> gradients ready, share of the step
};

struct TargetCheck {
  std::string name;              // "memory use"
  double value = NAN;            // percent
  std::string target;            // "70-90%"
  std::optional<bool> met;       // nullopt: not measured
};

// memory 70-90%, compute > 85%, bandwidth use 60-80%, gradient sync < 5% (exposed
// communication is shown without a target: compute and gradient sync already bound it).
std::vector<TargetCheck> check_targets(const Monitoring& m);

// The end-of-run table, one row per metric: value, target range, met / not met / not measured.
std::string monitoring_table(const std::vector<TargetCheck>& checks);

}  // namespace ctitan::metrics
