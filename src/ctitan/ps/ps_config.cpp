#include "ctitan/ps/ps_config.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"

namespace ctitan::ps {

std::string server_name() { return "ps"; }
std::string trainer_name(int rank) { return fmt::format("trainer{}", rank); }

int64_t microbatches_per_step(const config::JobConfig& config, int trainers) {
  const auto& t = config.training;
  return t.global_batch_size > 0 ? t.global_batch_size / (t.local_batch_size * trainers) : 1;
}

PsLayout validate_ps_config(const config::JobConfig& config, int rank, int world_size) {
  const auto& ps = config.ps;
  if (world_size < 2) {
    throw ConfigError(fmt::format("ctitan ps needs a server and at least one trainer (got world size {}): start it "
                                  "as ctitan run --nproc-per-node N ps ..., N >= 2", world_size));
  }
  PsLayout layout{rank, world_size};
  if (ps.batch_size != -1 && ps.batch_size != layout.trainers()) {
    // A round takes one push from every trainer; fewer would mix gradients of different
    // parameter versions (asynchronous SGD), which this mode does not do.
    throw ConfigError(fmt::format("ps.batch_size must be -1 or the number of trainers, {} (got {})",
                                  layout.trainers(), ps.batch_size));
  }
  if (!(ps.round_timeout_seconds > 0)) {
    throw ConfigError(fmt::format("ps.round_timeout_seconds must be > 0 (got {:g})", ps.round_timeout_seconds));
  }
  const auto& p = config.parallelism;
  auto refuse = [](const std::string& key, const std::string& value) {
    throw ConfigError(fmt::format("{} {} is not supported by ctitan ps (each trainer holds the whole model)", key,
                                  value));
  };
  if (p.data_parallel_replicate_degree != 1) refuse("parallelism.data_parallel_replicate_degree", std::to_string(p.data_parallel_replicate_degree));
  if (p.data_parallel_shard_degree != -1 && p.data_parallel_shard_degree != 1) refuse("parallelism.data_parallel_shard_degree", std::to_string(p.data_parallel_shard_degree));
  if (p.tensor_parallel_degree != 1) refuse("parallelism.tensor_parallel_degree", std::to_string(p.tensor_parallel_degree));
  if (p.context_parallel_degree != 1) refuse("parallelism.context_parallel_degree", std::to_string(p.context_parallel_degree));
  if (p.pipeline_parallel_degree != 1) refuse("parallelism.pipeline_parallel_degree", std::to_string(p.pipeline_parallel_degree));
  if (config.activation_checkpoint.mode != config::ActivationCheckpointMode::kNone) refuse("activation_checkpoint.mode", "other than none");
  if (config.checkpoint.create_seed_checkpoint) {
    throw ConfigError("checkpoint.create_seed_checkpoint needs one process: run it with ctitan train, then ctitan ps "
                      "resumes from it (checkpoint.initial_load_path)");
  }
  if (config.profiling.enable_profiling) refuse("profiling.enable_profiling", "true");
  const auto& t = config.training;
  if (t.global_batch_size > 0 && t.global_batch_size % (t.local_batch_size * layout.trainers()) != 0) {
    throw ConfigError(fmt::format("training.global_batch_size {} is not divisible by local_batch_size {} x {} "
                                  "trainers", t.global_batch_size, t.local_batch_size, layout.trainers()));
  }
  return layout;
}

}  // namespace ctitan::ps
