#pragma once
// What both servers of ctitan ps share (the gradients mode's ParameterServer and the
// dist_autograd mode's EmbeddingServer): their metrics, the liveness calls that notice a lost
// trainer, and how per-trainer states sit in one checkpoint part ("trainer<r>.<key>").
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/config/job_config.h"
#include "ctitan/metrics/metrics_processor.h"
#include "ctitan/ps/gradient_round.h"
#include "ctitan/ps/model_setup.h"
#include "ctitan/ps/ps_config.h"
#include "ctitan/ps/push_stats.h"
#include "ctitan/rpc/future.h"

namespace ctitan::ps {

// metrics.jsonl (appended after `resumed_step`) and the console line, as `ctitan train` writes
// them, plus `stats`' RPC fields. `stats` must outlive the processor.
std::unique_ptr<metrics::MetricsProcessor> make_server_metrics(const config::JobConfig& config,
                                                               const SeededModel& model, PsLayout layout,
                                                               PushStats& stats, int64_t resumed_step);

// One ps.hold call per trainer (by rank - 1), without timeout: only the trainer's end or death
// completes it; a death fails `rounds` with one line naming the trainer.
std::vector<rpc::Future> watch_trainers(const std::vector<std::shared_ptr<GradientRound>>& rounds, int trainers);

// Validation as `ctitan train` runs it on one process whose batch is every trainer's:
// validation.steps batches of local_batch_size x trainers rows from the validation set's start,
// forward only, the token-weighted mean loss logged for `step` (metrics.jsonl, console line,
// TensorBoard). `model` is the whole model to evaluate.
void run_validation(const config::JobConfig& config, PsLayout layout, SeededModel& model,
                    metrics::MetricsProcessor& metrics, int64_t step);

// The round's mean token loss and the largest trainer's, for MetricsProcessor::log.
std::pair<torch::Tensor, torch::Tensor> round_losses(const std::vector<Push>& pushes);

// {rank: {key: t}} as {"trainer<rank>.<key>": t}, and back. The way back throws a checkpoint
// error naming `part` for a key of no trainer of this run (another process count).
StateDict merge_per_trainer(const std::map<int, StateDict>& by_rank);
std::map<int, StateDict> split_per_trainer(const StateDict& merged, int trainers, const std::string& part);
// The "dataloader" part of the checkpoint of `step` by trainer; a checkpoint error when it holds
// another number of trainers than this run's.
std::map<int, StateDict> trainer_loader_states(const StateDict& dataloader, int trainers, int64_t step);

}  // namespace ctitan::ps
