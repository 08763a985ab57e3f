#include "ctitan/ps/server_parts.h"

#include <fmt/format.h>

#include <filesystem>

#include "ctitan/common/error.h"
#include "ctitan/data/packed_loader.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/metrics/peak_flops.h"
#include "ctitan/models/common/flops.h"
#include "ctitan/rpc/api.h"
#include "ctitan/components/autocast.h"
#include "ctitan/components/loss.h"
#include "ctitan/train/job_setup.h"

namespace ctitan::ps {

std::unique_ptr<metrics::MetricsProcessor> make_server_metrics(const config::JobConfig& config,
                                                               const SeededModel& model, PsLayout layout,
                                                               PushStats& stats, int64_t resumed_step) {
  const bool bf16 = config.training.mixed_precision_param == torch::kBFloat16;
  metrics::MetricsSetup setup;
  setup.flops_per_token = models::flops_per_token(model.job.args, config.training.seq_len);
  setup.peak_flops = metrics::resolve_peak_flops(config.metrics.peak_flops, bf16 ? torch::kBFloat16 : torch::kFloat).flops;
  setup.memory_capacity_bytes = metrics::physical_memory_bytes() / layout.world_size;
  setup.comm_bytes = [&stats] { return stats.total_bytes(); };
  setup.extra_fields = [&stats](int64_t window_steps) { return stats.take_fields(window_steps); };
  if (config.metrics.enable_jsonl) {
    setup.jsonl_path = (std::filesystem::path(config.job.dump_folder) / "metrics.jsonl").string();
    metrics::prepare_metrics_file(setup.jsonl_path, resumed_step);
  }
  return std::make_unique<metrics::MetricsProcessor>(std::move(setup));
}

std::vector<rpc::Future> watch_trainers(const std::vector<std::shared_ptr<GradientRound>>& rounds, int trainers) {
  std::vector<rpc::Future> holds;
  for (int rank = 1; rank <= trainers; ++rank) {
    auto hold = rpc::rpc_async(trainer_name(rank), "ps.hold", rpc::CallOptions{.timeout_seconds = 0});
    hold.then([rounds, rank](const rpc::Future& done) {
      try {
        done.wait();
      } catch (const std::exception& e) {
        for (const auto& round : rounds) {
          round->fail(fmt::format("ps: {} (rank {}) is gone: {}", trainer_name(rank), rank, e.what()));
        }
      }
    });
    holds.push_back(hold);
  }
  return holds;
}

std::pair<torch::Tensor, torch::Tensor> round_losses(const std::vector<Push>& pushes) {
  double loss_sum = 0, max_loss = 0;
  int64_t tokens = 0;
  for (const auto& p : pushes) {
    loss_sum += p.loss_sum;
    tokens += p.tokens;
    max_loss = std::max(max_loss, p.loss_sum / double(std::max<int64_t>(p.tokens, 1)));
  }
  return {torch::tensor(loss_sum / double(std::max<int64_t>(tokens, 1)), torch::kDouble),
          torch::tensor(max_loss, torch::kDouble)};
}

StateDict merge_per_trainer(const std::map<int, StateDict>& by_rank) {
  StateDict merged;
  for (const auto& [rank, state] : by_rank) {
    for (const auto& [key, tensor] : state) merged[fmt::format("{}.{}", trainer_name(rank), key)] = tensor;
  }
  return merged;
}

std::map<int, StateDict> split_per_trainer(const StateDict& merged, int trainers, const std::string& part) {
  std::map<int, StateDict> by_rank;
  for (const auto& [key, tensor] : merged) {
    const auto dot = key.find('.');
    const std::string who = key.substr(0, dot);
    int rank = 0;
    for (int r = 1; r <= trainers; ++r) rank = who == trainer_name(r) ? r : rank;
    if (dot == std::string::npos || rank == 0) {
      throw InputError(fmt::format("checkpoint error: {}/{} is not a state of one of this run's {} trainers: resume a "
                                   "ctitan ps checkpoint with the same number of processes", part, key, trainers));
    }
    by_rank[rank][key.substr(dot + 1)] = tensor;
  }
  return by_rank;
}

std::map<int, StateDict> trainer_loader_states(const StateDict& dataloader, int trainers, int64_t step) {
  auto states = split_per_trainer(dataloader, trainers, "dataloader");
  if (step > 0 && int(states.size()) != trainers) {
    throw InputError(fmt::format("checkpoint error: the checkpoint of step {} holds the dataloader states of {} "
                                 "trainers, this run has {}: resume a ctitan ps checkpoint with the same number of "
                                 "processes", step, states.size(), trainers));
  }
  return states;
}

void run_validation(const config::JobConfig& config, PsLayout layout, SeededModel& model,
                    metrics::MetricsProcessor& metrics, int64_t step) {
  // One process's batch of every trainer's rows (trainers x B, T): the validation of a ctitan
  // train of trainers data-parallel ranks.
  auto loader = train::make_loader(config, model.job, train::DataSplit::kValidation,
                                   config.training.local_batch_size * layout.trainers(), 0, 1);
  const bool bf16 = config.training.mixed_precision_param == torch::kBFloat16;
  auto sums = train::validation_sums(config, *loader, torch::kCPU, [&](const auto& inputs, const auto& labels) {
    components::AutocastGuard autocast(bf16, torch::kCPU);
    return components::summed_cross_entropy(model.model->forward(inputs), labels);  // logits (trainers x B, T, vocab)
  });
  metrics.log_validation(step, sums.loss_sum / double(std::max<int64_t>(sums.tokens, 1)), sums.tokens);
}

}  // namespace ctitan::ps
