// Pipeline schedules without processes: the exact compute orders (reproduced from PyTorch's
// generators) and lowered plans, the lowering rules, p2p tags, and, over a grid of every accepted
// (schedule, p, v, m), the invariants the runtime relies on, checked by the simulator.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/parallel/pipeline/schedule.h"
#include "ctitan/parallel/pipeline/schedule_sim.h"
#include "parallel/pipeline/schedule_grid.h"

namespace ctitan::parallel::pipeline {
namespace {

std::vector<std::string> texts(const std::vector<std::vector<Action>>& per_rank) {
  std::vector<std::string> out;
  for (const auto& actions : per_rank) out.push_back(to_string(actions));
  return out;
}

bool is_compute(const Action& a) { return a.op == Op::F || a.op == Op::B; }
bool is_send(const Action& a) { return a.op == Op::SendF || a.op == Op::SendB; }
bool is_recv(const Action& a) { return a.op == Op::RecvF || a.op == Op::RecvB; }

TEST(PipelineSchedule, ParsesCaseInsensitivelyAndRefusesOthersWithRefusal10) {
  EXPECT_EQ(parse_schedule("gpipe"), ScheduleKind::kGPipe);
  EXPECT_EQ(parse_schedule("1f1b"), ScheduleKind::k1F1B);
  EXPECT_EQ(parse_schedule("INTERLEAVED1F1B"), ScheduleKind::kInterleaved1F1B);
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B})
    EXPECT_EQ(parse_schedule(schedule_name(kind)), kind);
  EXPECT_STREQ(schedule_name(ScheduleKind::kInterleaved1F1B), "Interleaved1F1B");
  try {
    parse_schedule("ZBVZeroBubble");
    FAIL() << "no refusal";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "config error: parallelism.pipeline_parallel_schedule must be one of GPipe, 1F1B, Interleaved1F1B (got "
              "'ZBVZeroBubble'; torchtitan's LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble and DualPipeV are not "
              "implemented)");
  }
}

// GPipe and 1F1B at p=2, m=4, and Interleaved1F1B at p=2, v=2, m=4, as PyTorch's generators
// order them.
TEST(PipelineSchedule, ComputeOrdersMatchDesignTable) {
  const PipeShape two{2, 1, 4};
  EXPECT_EQ(texts(compute_orders(ScheduleKind::kGPipe, two)),
            (std::vector<std::string>{"0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3", "1F0 1F1 1F2 1F3 1B0 1B1 1B2 1B3"}));
  EXPECT_EQ(texts(compute_orders(ScheduleKind::k1F1B, two)),
            (std::vector<std::string>{"0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3", "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"}));
  EXPECT_EQ(texts(compute_orders(ScheduleKind::kInterleaved1F1B, PipeShape{2, 2, 4})),
            (std::vector<std::string>{"0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
                                      "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3"}));
}

// p=4, m=8, written out from the rules: GPipe all F then all B; 1F1B stage s
// warms up with min(m, p - s) = 4 - s forwards, then alternates B and F.
TEST(PipelineSchedule, FourStagesEightMicrobatches) {
  const PipeShape four{4, 1, 8};
  auto gpipe = texts(compute_orders(ScheduleKind::kGPipe, four));
  ASSERT_EQ(gpipe.size(), 4u);
  EXPECT_EQ(gpipe[2], "2F0 2F1 2F2 2F3 2F4 2F5 2F6 2F7 2B0 2B1 2B2 2B3 2B4 2B5 2B6 2B7");
  EXPECT_EQ(texts(compute_orders(ScheduleKind::k1F1B, four)),
            (std::vector<std::string>{"0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7",
                                      "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7",
                                      "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 2B7",
                                      "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7"}));
}

// 1F1B at p=2, m=4, lowered by ctitan's rules (docs/design/pipeline_parallel.md, decision 6).
TEST(PipelineSchedule, LoweredOneFOneBMatchesDesign) {
  const PipeShape two{2, 1, 4};
  EXPECT_EQ(texts(lower(compute_orders(ScheduleKind::k1F1B, two), two)),
            (std::vector<std::string>{
                "0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0B0 0WAIT_F0 0RECV_B1 0F2 0SEND_F2 0B1 0WAIT_F1 0RECV_B2 0F3 "
                "0SEND_F3 0RECV_B3 0B2 0WAIT_F2 0B3 0WAIT_F3",
                "1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1RECV_F2 1B1 1SEND_B1 1F2 1RECV_F3 1B2 1SEND_B2 1F3 1B3 "
                "1SEND_B3 1WAIT_B0 1WAIT_B1 1WAIT_B2 1WAIT_B3"}));
}

// Interleaved: stage 2's gradient sends are waited right before B(0, mb) on the same rank,
// stage 1's (no local stage below it) at the end.
TEST(PipelineSchedule, InterleavedWaitsGradientSendsBeforeTheLowerLocalBackward) {
  const PipeShape shape{2, 2, 4};
  auto lowered = texts(lower(compute_orders(ScheduleKind::kInterleaved1F1B, shape), shape));
  for (int mb = 0; mb < 4; ++mb) {
    std::string m = std::to_string(mb);
    EXPECT_NE(lowered[0].find("2WAIT_B" + m + " 0B" + m), std::string::npos) << lowered[0];
    EXPECT_NE(lowered[1].find("3WAIT_B" + m + " 1B" + m), std::string::npos) << lowered[1];
  }
  const std::string tail = "1WAIT_B0 1WAIT_B1 1WAIT_B2 1WAIT_B3";
  EXPECT_EQ(lowered[1].substr(lowered[1].size() - tail.size()), tail);
  EXPECT_EQ(lowered[0].find("0WAIT_B"), std::string::npos) << "stage 0 sends no gradient";
}

TEST(PipelineSchedule, TagsPairSendsWithReceivesAndPeersAreAdjacentStages) {
  const PipeShape shape{2, 1, 4};  // S = 2
  // ((dir * S) + receiving stage) * m + mb
  EXPECT_EQ(tag_of({Op::SendF, 0, 3}, shape), (0 * 2 + 1) * 4 + 3);
  EXPECT_EQ(tag_of({Op::RecvF, 1, 3}, shape), 7);
  EXPECT_EQ(tag_of({Op::WaitF, 0, 3}, shape), 7);
  EXPECT_EQ(tag_of({Op::SendB, 1, 2}, shape), (1 * 2 + 0) * 4 + 2);
  EXPECT_EQ(tag_of({Op::RecvB, 0, 2}, shape), 10);
  EXPECT_EQ(tag_of({Op::WaitB, 1, 2}, shape), 10);
  EXPECT_EQ(peer_stage({Op::SendF, 0, 0}), 1);
  EXPECT_EQ(peer_stage({Op::RecvB, 0, 0}), 1);
  EXPECT_EQ(peer_stage({Op::RecvF, 1, 0}), 0);
  EXPECT_EQ(peer_stage({Op::SendB, 1, 0}), 0);
  EXPECT_THROW(peer_stage({Op::F, 0, 0}), std::invalid_argument);
  EXPECT_THROW(tag_of({Op::B, 0, 0}, shape), std::invalid_argument);
}

TEST(PipelineSchedule, RefusesShapesTheGeneratorsCannotOrder) {
  EXPECT_THROW(compute_orders(ScheduleKind::k1F1B, PipeShape{2, 2, 4}), std::invalid_argument);
  EXPECT_THROW(compute_orders(ScheduleKind::kInterleaved1F1B, PipeShape{2, 2, 5}), std::invalid_argument);
  // B(0, 0) before B(2, 0) on rank 0: stage 0's gradient input cannot exist yet.
  const PipeShape shape{2, 2, 1};
  std::vector<std::vector<Action>> bad = {{{Op::F, 0, 0}, {Op::F, 2, 0}, {Op::B, 0, 0}, {Op::B, 2, 0}},
                                          {{Op::F, 1, 0}, {Op::F, 3, 0}, {Op::B, 3, 0}, {Op::B, 1, 0}}};
  EXPECT_THROW(lower(bad, shape), std::logic_error);
}

// The simulator must be able to fail: drop rank 1's receive and both ranks get stuck.
TEST(PipelineScheduleSim, ReportsTheStuckActionOfEachRank) {
  const PipeShape shape{2, 1, 2};
  auto lowered = lower(compute_orders(ScheduleKind::kGPipe, shape), shape);
  ASSERT_EQ(to_string(lowered[1][0]), "1RECV_F0");
  lowered[1].erase(lowered[1].begin());
  SimResult sim = simulate(lowered, shape);
  EXPECT_FALSE(sim.completed);
  EXPECT_EQ(sim.stuck, (std::vector<std::string>{"0B0", "1F0"}));
}

// One microbatch through 2 stages: F, F, B, B in sequence, each rank busy 3 of 6.
TEST(PipelineScheduleSim, TimesOneMicrobatch) {
  const PipeShape shape{2, 1, 1};
  SimResult sim = simulate(lower(compute_orders(ScheduleKind::k1F1B, shape), shape), shape, 1, 2);
  ASSERT_TRUE(sim.completed);
  EXPECT_DOUBLE_EQ(sim.makespan, 6);
  EXPECT_EQ(sim.idle_share, (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(sim.peak_in_flight, (std::vector<int>{1, 1}));
  EXPECT_EQ(sim.stuck, (std::vector<std::string>{"", ""}));
}

using plan_grid::accepted_grid;
using plan_grid::GridCase;
using plan_grid::name;

TEST(PipelineScheduleGrid, EveryMicrobatchRunsOneForwardThenOneBackwardOnItsStagesRank) {
  for (const GridCase& c : accepted_grid()) {
    SCOPED_TRACE(name(c));
    const PipeShape& shape = c.shape;
    auto orders = compute_orders(c.kind, shape);
    ASSERT_EQ(static_cast<int>(orders.size()), shape.pp);
    for (int r = 0; r < shape.pp; ++r) {
      // (stage, mb) -> position of its F and of its B on this rank.
      std::map<std::pair<int, int>, int> f_at, b_at;
      for (int i = 0; i < static_cast<int>(orders[r].size()); ++i) {
        const Action& a = orders[r][i];
        ASSERT_TRUE(is_compute(a)) << to_string(a);
        ASSERT_EQ(shape.rank_of(a.stage), r) << to_string(a);
        auto& seen = a.op == Op::F ? f_at : b_at;
        ASSERT_TRUE(seen.emplace(std::pair{a.stage, a.microbatch}, i).second) << "twice: " << to_string(a);
      }
      ASSERT_EQ(static_cast<int>(f_at.size()), shape.stages_per_rank * shape.microbatches);
      ASSERT_EQ(b_at.size(), f_at.size());
      for (const auto& [key, f] : f_at) EXPECT_LT(f, b_at.at(key)) << "B before F at stage " << key.first;
    }
  }
}

TEST(PipelineScheduleGrid, LoweringPairsEverySendWithOneReceiveAndOneWaitAndFollowsDesignRules) {
  for (const GridCase& c : accepted_grid()) {
    SCOPED_TRACE(name(c));
    const PipeShape& shape = c.shape;
    auto orders = compute_orders(c.kind, shape);
    auto lowered = lower(orders, shape);
    ASSERT_EQ(lowered.size(), orders.size());
    // tag -> (rank, op) of each end.
    std::map<int32_t, std::vector<std::pair<int, Op>>> sends, recvs, waits;
    for (int r = 0; r < shape.pp; ++r) {
      const auto& acts = lowered[r];
      std::vector<Action> compute;
      std::vector<int> compute_pos;
      for (int i = 0; i < static_cast<int>(acts.size()); ++i)
        if (is_compute(acts[i])) compute.push_back(acts[i]), compute_pos.push_back(i);
      EXPECT_EQ(compute, orders[r]) << "lowering reordered compute";
      for (int i = 0; i < static_cast<int>(acts.size()); ++i) {
        const Action& a = acts[i];
        if (is_compute(a)) continue;
        ASSERT_NE(shape.rank_of(peer_stage(a)), r) << "comm with itself: " << to_string(a);
        int32_t tag = tag_of(a, shape);
        ASSERT_GE(tag, 0);
        (is_send(a) ? sends : is_recv(a) ? recvs : waits)[tag].emplace_back(r, a.op);
        // Position of the compute action k this comm belongs to.
        auto k_of = [&](Op op) {
          Action target{op, a.stage, a.microbatch};
          auto it = std::find(compute.begin(), compute.end(), target);
          EXPECT_NE(it, compute.end()) << to_string(a) << " has no " << to_string(target);
          return static_cast<int>(it - compute.begin());
        };
        if (is_send(a)) {
          // Right after the compute that produced it.
          ASSERT_GT(i, 0);
          EXPECT_EQ(acts[i - 1], (Action{a.op == Op::SendF ? Op::F : Op::B, a.stage, a.microbatch})) << to_string(a);
        } else if (is_recv(a)) {
          // One compute ahead: after compute k - 2 and before compute k - 1.
          int k = k_of(a.op == Op::RecvF ? Op::F : Op::B);
          if (k >= 2) {
            EXPECT_GT(i, compute_pos[k - 2]) << to_string(a);
          }
          EXPECT_LT(i, compute_pos[std::max(k - 1, 0)]) << to_string(a);
        } else if (a.op == Op::WaitF) {
          // After B(s, mb) and its own gradient send, if any, with nothing in between.
          int j = i - 1;
          if (j >= 0 && acts[j].op == Op::SendB) --j;
          ASSERT_GE(j, 0);
          EXPECT_EQ(acts[j], (Action{Op::B, a.stage, a.microbatch})) << to_string(a);
        } else if (a.stage - shape.pp >= 0) {
          // WaitB right before B(s - p, mb) on this rank...
          ASSERT_LT(i + 1, static_cast<int>(acts.size()));
          EXPECT_EQ(acts[i + 1], (Action{Op::B, a.stage - shape.pp, a.microbatch})) << to_string(a);
        } else {
          // ...or in the trailing block of waits.
          for (int j = i; j < static_cast<int>(acts.size()); ++j) EXPECT_EQ(acts[j].op, Op::WaitB) << to_string(a);
        }
      }
    }
    // Each send: exactly one matching receive on the peer's rank and one wait on its own rank.
    for (const auto& [tag, ends] : sends) {
      ASSERT_EQ(ends.size(), 1u) << "tag " << tag << " sent twice";
      auto [rank, op] = ends[0];
      ASSERT_EQ(recvs[tag].size(), 1u) << "tag " << tag;
      EXPECT_EQ(recvs[tag][0].second, op == Op::SendF ? Op::RecvF : Op::RecvB);
      EXPECT_NE(recvs[tag][0].first, rank);
      ASSERT_EQ(waits[tag].size(), 1u) << "tag " << tag;
      EXPECT_EQ(waits[tag][0], (std::pair{rank, op == Op::SendF ? Op::WaitF : Op::WaitB}));
    }
    for (const auto& [tag, ends] : recvs) EXPECT_EQ(sends.count(tag), 1u) << "receive without send, tag " << tag;
    // Every stage boundary crossing ranks moves each microbatch once each way.
    size_t crossings = shape.pp == 1 ? 0 : static_cast<size_t>(shape.stages() - 1);
    EXPECT_EQ(sends.size(), 2 * crossings * static_cast<size_t>(shape.microbatches));
  }
}

// Peak in flight: issue #15's memory claim (1F1B stage s holds min(m, p - s), GPipe m).
TEST(PipelineScheduleGrid, SimulatorCompletesWithTheExpectedPeakInFlight) {
  for (const GridCase& c : accepted_grid()) {
    SCOPED_TRACE(name(c));
    const PipeShape& shape = c.shape;
    SimResult sim = simulate(lower(compute_orders(c.kind, shape), shape), shape);
    ASSERT_TRUE(sim.completed);
    ASSERT_EQ(static_cast<int>(sim.peak_in_flight.size()), shape.stages());
    for (int s = 0; s < shape.stages(); ++s) {
      int peak = sim.peak_in_flight[s];
      if (c.kind == ScheduleKind::kGPipe) {
        EXPECT_EQ(peak, shape.microbatches) << "stage " << s;
      } else if (c.kind == ScheduleKind::k1F1B) {
        EXPECT_EQ(peak, std::min(shape.microbatches, shape.pp - s)) << "stage " << s;
      } else {
        EXPECT_GE(peak, 1);
        EXPECT_LE(peak, shape.microbatches);
      }
    }
  }
}

// Idle share with equal stages, exact up to double rounding (the times are small integers and
// halves, so 1e-12 is many orders above the rounding of one division). Several F:B ratios: with
// equal stages the bubble does not depend on it.
//
// Interleaved1F1B: the usual (p-1)/(v*m+p-1) holds for every m >= p (not only p | m: m = 6,
// p = 4 runs one round of 6 and also matches). With m < p it does not: a microbatch's trip round
// the p ranks takes p slots of which only m carry work, so each of the v loops idles p - m
// more, and the step lasts v*p + m - 1 units of (F + B) instead of v*m + p - 1. The test pins
// that larger figure, which theoretical_bubble() reports.
TEST(PipelineScheduleGrid, SimulatedIdleShareEqualsTheBubbleFormula) {
  for (const GridCase& c : accepted_grid()) {
    for (double t_b : {0.5, 1.0, 2.0, 3.0}) {
      SCOPED_TRACE(name(c) + " t_b=" + std::to_string(t_b));
      const PipeShape& shape = c.shape;
      const double p = shape.pp, m = shape.microbatches, v = shape.stages_per_rank;
      SimResult sim = simulate(lower(compute_orders(c.kind, shape), shape), shape, 1, t_b);
      ASSERT_TRUE(sim.completed);
      double expected;
      if (c.kind != ScheduleKind::kInterleaved1F1B) {
        expected = (p - 1) / (m + p - 1);
      } else if (m >= p) {
        expected = (p - 1) / (v * m + p - 1);
      } else {
        expected = 1 - v * m / (v * p + m - 1);
        EXPECT_GT(expected, (p - 1) / (v * m + p - 1));
      }
      EXPECT_NEAR(theoretical_bubble(c.kind, shape), expected, 1e-12);
      EXPECT_NEAR(sim.makespan * (1 - expected), v * m * (1 + t_b), 1e-9) << "busy time";
      for (int r = 0; r < shape.pp; ++r) EXPECT_NEAR(sim.idle_share[r], expected, 1e-12) << "rank " << r;
    }
  }
}

TEST(PipelineScheduleGrid, DesignFigures) {
  // (p-1)/(m+p-1) = 0.2 for GPipe/1F1B at p=2, m=4; (p-1)/(v*m+p-1) = 1/9 for Interleaved1F1B
  // at p=2, v=2, m=4.
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    const PipeShape shape{2, 1, 4};
    SimResult sim = simulate(lower(compute_orders(kind, shape), shape), shape);
    EXPECT_NEAR(sim.idle_share[0], 0.2, 1e-12);
    EXPECT_NEAR(sim.idle_share[1], 0.2, 1e-12);
  }
  const PipeShape shape{2, 2, 4};
  SimResult sim = simulate(lower(compute_orders(ScheduleKind::kInterleaved1F1B, shape), shape), shape);
  EXPECT_NEAR(sim.idle_share[0], 1.0 / 9, 1e-12);
  EXPECT_NEAR(sim.idle_share[1], 1.0 / 9, 1e-12);
}

}  // namespace
}  // namespace ctitan::parallel::pipeline
