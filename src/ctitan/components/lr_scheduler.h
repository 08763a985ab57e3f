#pragma once
// torchtitan's warmup-stable-decay schedule as a multiplier of the peak lr. Like LambdaLR, the
// factor for optimizer step k (1-based) is factor(k - 1).
#include <cstdint>
#include <string>

#include "ctitan/common/state_dict.h"
#include "ctitan/config/job_config.h"

namespace ctitan::components {

class LrScheduler {
 public:
  LrScheduler(const config::LrScheduler& config, int64_t training_steps, double peak_lr);

  // Multiplier in [min_lr_factor, 1] after `steps_done` optimizer steps.
  double factor(int64_t steps_done) const;
  double current_lr() const { return peak_lr_ * factor(steps_done_); }
  void step() { ++steps_done_; }

  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  int64_t warmup_steps_, stable_steps_, decay_steps_;
  config::DecayType decay_type_;
  double min_lr_factor_, peak_lr_;
  int64_t steps_done_ = 0;
};

}  // namespace ctitan::components
