#include "ctitan/components/lr_scheduler.h"

#include <algorithm>
#include <cmath>

namespace ctitan::components {

LrScheduler::LrScheduler(const config::LrScheduler& c, int64_t training_steps, double peak_lr)
    : warmup_steps_(c.warmup_steps), decay_type_(c.decay_type), min_lr_factor_(c.min_lr_factor),
      peak_lr_(peak_lr) {
  decay_steps_ = c.decay_ratio >= 0 ? int64_t(std::llround(double(training_steps) * c.decay_ratio))
                                    : training_steps - warmup_steps_;
  // Warmup plus decay longer than the run: decay takes what warmup leaves.
  decay_steps_ = std::max<int64_t>(0, std::min(decay_steps_, training_steps - warmup_steps_));
  stable_steps_ = std::max<int64_t>(0, training_steps - warmup_steps_ - decay_steps_);
}

double LrScheduler::factor(int64_t s) const {
  const int64_t warmup_stable = warmup_steps_ + stable_steps_;
  s = std::min(s, warmup_stable + decay_steps_);
  // Warmup reaches 1 only after it ends: step k of a w-step warmup uses k / (w + 1), so no
  // step ever runs at lr 0.
  if (s < warmup_steps_) return double(s + 1) / double(warmup_steps_ + 1);
  if (s < warmup_stable || decay_steps_ == 0) return 1.0;
  double progress = double(s + 1 - warmup_stable) / double(decay_steps_ + 1);
  double decay = 1.0;
  switch (decay_type_) {
    case config::DecayType::kLinear: decay = 1.0 - progress; break;
    case config::DecayType::kSqrt: decay = 1.0 - std::sqrt(progress); break;
    case config::DecayType::kCosine: decay = 0.5 * (1.0 + std::cos(M_PI * progress)); break;
  }
  return min_lr_factor_ + (1.0 - min_lr_factor_) * decay;
}

StateDict LrScheduler::state_dict() const { return {{"steps_done", scalar_state(steps_done_)}}; }

void LrScheduler::load_state_dict(const StateDict& state) {
  steps_done_ = require_state(state, "steps_done").item<int64_t>();
}

}  // namespace ctitan::components
