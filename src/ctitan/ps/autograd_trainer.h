#pragma once
// A trainer of `ctitan ps --ps.mode dist_autograd` (design docs/design/rpc.md §8): the token
// embedding is the server's, looked up by RPC inside a distributed autograd context; the rest of
// the model is this trainer's own. dist_autograd::backward reaches the server's embedding, and a
// DistributedOptimizer steps it there and the local parameters here, clipped by the norm over
// both. Trainer 1 writes metrics.jsonl and the console line.
#include <torch/torch.h>

#include <memory>

#include "ctitan/config/job_config.h"
#include "ctitan/data/packed_loader.h"
#include "ctitan/metrics/metrics_processor.h"
#include "ctitan/ps/model_setup.h"
#include "ctitan/ps/ps_config.h"
#include "ctitan/rpc/future.h"
#include "ctitan/train/lr_scheduler.h"

namespace ctitan::ps {

class AutogradTrainer {
 public:
  AutogradTrainer(config::JobConfig config, PsLayout layout);

  rpc::Future hold() const { return done_; }

  // After init_rpc: training.steps steps; drops every RRef it made before returning, so that the
  // graceful shutdown finds none.
  void run();

 private:
  config::JobConfig config_;
  PsLayout layout_;
  SeededModel model_;
  std::unique_ptr<data::PackedLoader> loader_;
  std::unique_ptr<train::LrScheduler> lr_scheduler_;
  std::unique_ptr<metrics::MetricsProcessor> metrics_;
  bool bf16_ = false;
  rpc::Future done_;
};

}  // namespace ctitan::ps
