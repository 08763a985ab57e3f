#pragma once
// A trainer of `ctitan ps --ps.mode gradients` (ranks 1..N-1): computes the gradient of its own
// slice of each global batch on a local copy of the model, pushes it to the server, and copies
// back the parameters the server answers with. It never steps an optimizer itself.
#include <torch/torch.h>

#include <memory>

#include "ctitan/config/job_config.h"
#include "ctitan/data/packed_loader.h"
#include "ctitan/ps/model_setup.h"
#include "ctitan/ps/ps_config.h"
#include "ctitan/rpc/future.h"

namespace ctitan::ps {

class GradientTrainer {
 public:
  GradientTrainer(config::JobConfig config, PsLayout layout);

  // The ps.hold handler: completed when run() has finished its last step.
  rpc::Future hold() const { return done_; }

  // After init_rpc: joins (takes the server's parameters and step), then one push per step.
  void run();

 private:
  // Forward and backward of this trainer's microbatches of one step, summed token losses:
  // the gradient lands in .grad; returns (summed loss, valid tokens).
  std::pair<double, int64_t> forward_backward();

  config::JobConfig config_;
  PsLayout layout_;
  SeededModel model_;
  std::unique_ptr<data::PackedLoader> loader_;
  int64_t microbatches_ = 1;
  bool bf16_ = false;
  rpc::Future done_;
};

}  // namespace ctitan::ps
