#include "ctitan/components/lr_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ctitan::components {
namespace {

config::LrScheduler schedule(int64_t warmup, double decay_ratio, config::DecayType type, double min_factor) {
  config::LrScheduler c;
  c.warmup_steps = warmup;
  c.decay_ratio = decay_ratio;
  c.decay_type = type;
  c.min_lr_factor = min_factor;
  return c;
}

// 10 steps, warmup 2, decay_ratio 0.8: decay 8 steps, stable 0. Warmup gives (s+1)/(w+1);
// decay progress after s steps is (s + 1 - 2) / (8 + 1).
TEST(LrScheduler, LinearWarmupThenLinearDecayByHand) {
  LrScheduler s(schedule(2, 0.8, config::DecayType::kLinear, 0.0), 10, 1.0);
  EXPECT_DOUBLE_EQ(s.factor(0), 1.0 / 3);
  EXPECT_DOUBLE_EQ(s.factor(1), 2.0 / 3);
  EXPECT_DOUBLE_EQ(s.factor(2), 8.0 / 9);
  EXPECT_DOUBLE_EQ(s.factor(9), 1.0 / 9);
  EXPECT_DOUBLE_EQ(s.factor(10), 0.0);  // past the end: clamped to the last point
  EXPECT_DOUBLE_EQ(s.factor(50), 0.0);
}

TEST(LrScheduler, StablePhaseWhenDecayIsShort) {
  // decay_ratio 0.5 of 10: decay 5, stable 3 (steps 2..4 at full lr).
  LrScheduler s(schedule(2, 0.5, config::DecayType::kLinear, 0.0), 10, 1.0);
  EXPECT_DOUBLE_EQ(s.factor(2), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(4), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(5), 5.0 / 6);
}

TEST(LrScheduler, CosineAndSqrtWithFloor) {
  LrScheduler cosine(schedule(2, 0.8, config::DecayType::kCosine, 0.1), 10, 1.0);
  // progress 1/9: 0.1 + 0.9 * 0.5 * (1 + cos(pi / 9))
  EXPECT_NEAR(cosine.factor(2), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 9)), 1e-15);
  EXPECT_NEAR(cosine.factor(10), 0.1, 1e-15);
  LrScheduler sqrt_decay(schedule(2, 0.8, config::DecayType::kSqrt, 0.0), 10, 1.0);
  EXPECT_NEAR(sqrt_decay.factor(2), 1.0 - 1.0 / 3, 1e-15);
}

TEST(LrScheduler, NoDecayRatioDecaysAfterWarmup) {
  LrScheduler s(schedule(2, -1, config::DecayType::kLinear, 0.0), 10, 1.0);
  EXPECT_DOUBLE_EQ(s.factor(2), 8.0 / 9);
}

TEST(LrScheduler, StepAndStateRoundTrip) {
  LrScheduler s(schedule(2, 0.8, config::DecayType::kLinear, 0.0), 10, 0.5);
  EXPECT_DOUBLE_EQ(s.current_lr(), 0.5 / 3);
  s.step();
  s.step();
  s.step();
  LrScheduler restored(schedule(2, 0.8, config::DecayType::kLinear, 0.0), 10, 0.5);
  restored.load_state_dict(s.state_dict());
  EXPECT_DOUBLE_EQ(restored.current_lr(), 0.5 * 7.0 / 9);
}

}  // namespace
}  // namespace ctitan::components
