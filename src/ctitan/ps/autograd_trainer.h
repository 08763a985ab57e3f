#pragma once
// A trainer of `ctitan ps --ps.mode dist_autograd` (docs/design/rpc.md, decision 18): the token
// embedding is the server's, looked up by RPC inside a distributed autograd context; the rest of
// the model is this trainer's own. dist_autograd::backward reaches the server's embedding, and a
// DistributedOptimizer steps it there and the local parameters here, clipped by the norm over
// both. After each step it reports to the server (loss, tokens, norm, its lookup's latency and
// bytes, its dataloader position) and waits for every trainer's report: the server logs the
// step and writes checkpoints, fetching this trainer's state meanwhile (ps.trainer_state).
#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ctitan/config/job_config.h"
#include "ctitan/data/packed_loader.h"
#include "ctitan/ps/model_setup.h"
#include "ctitan/ps/ps_config.h"
#include "ctitan/ps/ps_functions.h"
#include "ctitan/rpc/dist_optimizer.h"
#include "ctitan/rpc/future.h"
#include "ctitan/components/lr_scheduler.h"

namespace ctitan::ps {

class AutogradTrainer {
 public:
  AutogradTrainer(config::JobConfig config, PsLayout layout);

  rpc::Future hold() const { return done_; }
  // The ps.trainer_state handler: runs while run() waits in a report, so nothing moves under it.
  TrainerStateWire state();

  // After init_rpc: starts (ps.start: the server's step and, resumed, this trainer's states),
  // then steps until training.steps; drops every RRef it made before returning, so that the
  // graceful shutdown finds none.
  void run();

 private:
  void run_steps();
  // Puts a resumed state back: local parameters, optimizer (on both owners), schedule, loader.
  void load(const WireState& model, const WireState& optimizer, const WireState& lr, const WireState& loader);

  config::JobConfig config_;
  PsLayout layout_;
  SeededModel model_;
  std::unique_ptr<data::PackedLoader> loader_;
  std::unique_ptr<components::LrScheduler> lr_scheduler_;
  std::unique_ptr<rpc::DistributedOptimizer> optimizer_;
  std::vector<std::string> optimizer_fqns_;  // the optimizer's parameters in order: the embedding, then local
  bool bf16_ = false;
  rpc::Future done_;
};

}  // namespace ctitan::ps
