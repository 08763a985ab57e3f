#pragma once
// Virtual-time simulation of lowered pipeline actions (docs/design/pipeline_parallel.md,
// decision 8): does the plan complete, how long is a step, how idle is each rank, and how many
// microbatches of activations does each stage hold at its peak. Used by plan validation (the
// deadlock backstop), tests and the bench.
#include <string>
#include <vector>

#include "ctitan/parallel/pipeline/schedule.h"

namespace ctitan::parallel::pipeline {

struct SimResult {
  bool completed = false;
  std::vector<std::string> stuck;  // per rank: the first action it cannot run ("1F2"), "" if done
  double makespan = 0;             // time at which the last rank finishes
  std::vector<double> idle_share;  // per rank: 1 - busy / makespan, busy = its F and B time
  std::vector<int> peak_in_flight;  // per stage: max over time of (forwards done - backwards done)
  std::vector<double> transfer_time;  // per p2p tag (tag_of): when it happened; -1 if it did not
};

// Rendezvous semantics, as Gloo's: Send/Recv post instantly and never block; a transfer happens
// once both ends are posted (zero latency); F/B wait for their input transfer (or, for adjacent
// stages on one rank, the local producer); WaitX waits for its send's transfer. Every F costs
// t_f and every B t_b, whatever the stage.
SimResult simulate(const std::vector<std::vector<Action>>& lowered, const PipeShape& shape, double t_f = 1,
                   double t_b = 2);

// The idle share of every rank with equal stages and zero-latency links, any F:B cost ratio:
// 1 - v*m / (v*max(m, p) + min(m, p) - 1), v = 1 for GPipe and 1F1B. For GPipe/1F1B that is
// (p-1)/(m+p-1); for Interleaved1F1B it is (p-1)/(v*m+p-1) when m >= p, and larger when m < p
// (schedule_test.cpp checks it against simulate() over the whole grid).
double theoretical_bubble(ScheduleKind kind, const PipeShape& shape);

}  // namespace ctitan::parallel::pipeline
