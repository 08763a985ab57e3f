#pragma once
// The parameter server of `ctitan ps --ps.mode gradients` (rank 0): holds the master parameters,
// AdamW and the LR schedule; each round it sums the trainers' gradients in rank order, divides by
// the round's tokens, clips, steps, and answers every trainer with the new parameters at once.
// It logs metrics.jsonl and the console line as `ctitan train` does, and writes and resumes
// `ctitan train`'s checkpoints as one rank (model, optimizer, lr_scheduler, train_state), with
// every trainer's dataloader state in the dataloader part ("trainer<r>.<key>").
#include <torch/torch.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "ctitan/checkpoint/manager.h"
#include "ctitan/common/state_dict.h"
#include "ctitan/config/job_config.h"
#include "ctitan/metrics/metrics_processor.h"
#include "ctitan/ps/gradient_round.h"
#include "ctitan/ps/model_setup.h"
#include "ctitan/ps/ps_config.h"
#include "ctitan/ps/push_stats.h"
#include "ctitan/rpc/future.h"
#include "ctitan/components/adamw.h"
#include "ctitan/components/lr_scheduler.h"

namespace ctitan::ps {

class ParameterServer : public checkpoint::Stateful {
 public:
  ParameterServer(config::JobConfig config, PsLayout layout);

  // Handlers for ps_functions (agent threads).
  std::tuple<int64_t, torch::Tensor, c10::Dict<std::string, at::Tensor>> join(int64_t rank);
  rpc::Future push(Push push) { return round_->add(std::move(push)); }

  // After init_rpc: runs the rounds of steps 1..training.steps; returns when every trainer is
  // done. Throws one line when a round times out or a trainer is lost.
  void run();

 private:
  void run_steps();
  // Every stateful part by name, as train::Trainer::state_dicts() (no rng: nothing here draws).
  std::map<std::string, StateDict> state_dicts() const override;
  // Fills the parameters, optimizer, schedule, step and the trainers' dataloader states.
  void load_state_dicts(const std::map<std::string, StateDict>& state) override;
  // Sum in rank order, divide by the tokens, clip, step, schedule. Returns the norm before clipping.
  torch::Tensor update(const std::vector<Push>& pushes, int64_t tokens);
  void log_step(const std::vector<Push>& pushes, const torch::Tensor& grad_norm);
  // Mean token loss over validation.steps batches of the trainers' combined rows: the windows
  // `ctitan train` evaluates at the same global batch, on one process or data-parallel.
  void validate();

  config::JobConfig config_;
  PsLayout layout_;
  SeededModel model_;
  std::unique_ptr<components::AdamW> optimizer_;
  std::unique_ptr<components::LrScheduler> lr_scheduler_;
  std::unique_ptr<metrics::MetricsProcessor> metrics_;
  // Shared with the liveness callbacks, which may run after a failed run() has returned.
  std::shared_ptr<GradientRound> round_;
  std::vector<rpc::Future> holds_;  // one ps.hold call per trainer, by rank - 1
  PushStats stats_{"rpc_push_latency"};
  std::mutex params_mutex_;
  torch::Tensor flat_params_;  // (numel,) fp32: what ps.join hands out
  std::unique_ptr<checkpoint::CheckpointManager> checkpointer_;
  std::map<int, StateDict> loader_states_;  // by trainer rank: after the last completed step
  bool in_update_ = false;  // an exception now leaves the parameters partly updated
  int64_t step_ = 0;
  int64_t ntokens_seen_ = 0;
};

}  // namespace ctitan::ps
