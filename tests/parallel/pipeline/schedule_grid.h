#pragma once
// The pipeline plans the config accepts, as a grid for schedule tests (schedule_test.cpp,
// issue_order_test.cpp).
#include <algorithm>
#include <string>
#include <vector>

#include "ctitan/parallel/pipeline/schedule.h"

namespace ctitan::parallel::pipeline::plan_grid {

struct GridCase {
  ScheduleKind kind;
  PipeShape shape;
};

// Every (schedule, p, v, m) that plan_pipeline accepts for p 1..max_pp, v 1-3, m 1-12: GPipe and
// 1F1B have one stage per rank, 1F1B needs m >= stages, Interleaved needs v >= 2 and m % rounds == 0.
inline std::vector<GridCase> accepted_grid(int max_pp = 4) {
  std::vector<GridCase> cases;
  for (int p = 1; p <= max_pp; ++p)
    for (int v = 1; v <= 3; ++v)
      for (int m = 1; m <= 12; ++m) {
        if (v == 1) cases.push_back({ScheduleKind::kGPipe, {p, v, m}});
        if (v == 1 && m >= p) cases.push_back({ScheduleKind::k1F1B, {p, v, m}});
        if (v >= 2 && m % std::max(1, m / p) == 0) cases.push_back({ScheduleKind::kInterleaved1F1B, {p, v, m}});
      }
  return cases;
}

// "1F1B p=2 v=1 m=4", for SCOPED_TRACE.
inline std::string name(const GridCase& c) {
  return std::string(schedule_name(c.kind)) + " p=" + std::to_string(c.shape.pp) +
         " v=" + std::to_string(c.shape.stages_per_rank) + " m=" + std::to_string(c.shape.microbatches);
}

}  // namespace ctitan::parallel::pipeline::plan_grid
