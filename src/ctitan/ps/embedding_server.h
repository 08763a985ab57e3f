#pragma once
// The server of `ctitan ps --ps.mode dist_autograd` (rank 0), PyTorch's parameter-server
// tutorial: it owns the token embedding behind an RRef; trainers look tokens up through it
// (ps.embed) inside their distributed autograd context, so their backward reaches the embedding
// here, and their DistributedOptimizers step it here.
//
// The trainers step in lockstep, so that a run is reproducible: each trainer's forward of a step
// reads the embedding of the step before (ps.ready: every trainer's backward is done before any
// update; PyTorch's tutorial lets them race), and each waits at the end of a step until all
// trainers have reported it (ps.report). Only the order in which the trainers' AdamW updates of
// the embedding land varies (last bits). At a report round the server logs the step
// (metrics.jsonl and the console line, as `ctitan train`) and, when one is due, writes the
// checkpoint of that step as one rank while every trainer waits, so the embedding and each
// trainer's state are those after the same step. The checkpoint holds trainer 1's model (with
// the server's embedding), optimizer and lr_scheduler under `ctitan train`'s keys (so the model
// part is a whole model, which `checkpoint export` takes); trainers 2.. under "ps_trainers"
// ("trainer<r>.model.<fqn>", ".optimizer.<key>", ".lr_scheduler.<key>"); every trainer's
// dataloader state under "dataloader" ("trainer<r>.<key>").
#include <torch/torch.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "ctitan/checkpoint/manager.h"
#include "ctitan/config/job_config.h"
#include "ctitan/metrics/metrics_processor.h"
#include "ctitan/ps/gradient_round.h"
#include "ctitan/ps/model_setup.h"
#include "ctitan/ps/ps_config.h"
#include "ctitan/ps/ps_functions.h"
#include "ctitan/ps/push_stats.h"
#include "ctitan/rpc/rref.h"
#include "ctitan/components/lr_scheduler.h"

namespace ctitan::ps {

// What the server keeps of a trainer for checkpoints: its model without the embedding, its
// optimizer (components::AdamW's keys, the embedding's moments included) and its lr_scheduler.
struct TrainerState {
  StateDict model, optimizer, lr_scheduler;
};

class EmbeddingServer : public checkpoint::Stateful {
 public:
  EmbeddingServer(config::JobConfig config, PsLayout layout);

  // Handlers (agent threads). ps.embedding: an RRef to the embedding weight (vocab, dim), a leaf
  // that requires grad; made at the first call (an RRef needs the running agent).
  rpc::RRef embedding();
  // ps.start: the steps done and, after a resume, the trainer's states.
  std::tuple<int64_t, WireState, WireState, WireState, WireState> start(int64_t rank);
  rpc::Future ready(Push ready) { return backward_done_->add(std::move(ready)); }
  rpc::Future report(Push report) { return round_->add(std::move(report)); }

  // After init_rpc: runs until every trainer is done; throws one line naming a lost trainer or
  // the trainers missing from a round.
  void run();
  // Drops the server's own reference before the graceful shutdown.
  void release();

 private:
  // The checkpoint's parts from the trainers' states, the embedding and the step.
  std::map<std::string, StateDict> assemble(const std::map<int, TrainerState>& trainers) const;
  // Every trainer's state, fetched (ps.trainer_state) while all wait in the round's reports.
  std::map<std::string, StateDict> state_dicts() const override;
  // What a resume fills, before any trainer is reachable: the server's own model stands for
  // each trainer's.
  std::map<std::string, StateDict> load_targets() const override;
  // Takes a loaded checkpoint into the embedding, the step and trainer_states_.
  void load_state_dicts(const std::map<std::string, StateDict>& parts) override;
  // Validation of trainer 1's model (run_validation), while every trainer waits in its report.
  void validate();

  config::JobConfig config_;
  PsLayout layout_;
  SeededModel model_;
  std::mutex mutex_;
  rpc::RRef weight_;
  std::shared_ptr<GradientRound> backward_done_;  // ps.ready: every trainer's backward of the step
  std::shared_ptr<GradientRound> round_;          // ps.report: every trainer's step
  PushStats stats_{"rpc_embed_latency"};
  std::unique_ptr<metrics::MetricsProcessor> metrics_;
  std::unique_ptr<checkpoint::CheckpointManager> checkpointer_;
  std::unique_ptr<components::LrScheduler> schedule_;  // never stepped: the trainers' lr for the log, its state's shape
  std::map<int, TrainerState> trainer_states_;  // by rank, from the checkpoint resumed (else empty)
  std::map<int, StateDict> loader_states_;      // by rank, after the last completed step
  int64_t step_ = 0;
  int64_t ntokens_seen_ = 0;
};

}  // namespace ctitan::ps
