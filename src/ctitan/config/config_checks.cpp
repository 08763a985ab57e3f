// The rules of a resolved job config, each a ConfigError naming the key and the value.
#include "ctitan/config/config_checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>

#include "ctitan/common/error.h"
#include "ctitan/config/config_fields.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/data/dataset_format.h"
#include "ctitan/models/model_spec.h"

namespace ctitan::config {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(message);
}

void check_size_ranges(const JobConfig& c);
void check_datasets(const JobConfig& c);

}  // namespace

void check_config(const JobConfig& c) {
  // inf and nan parse as TOML floats and as overrides; no key means anything by them.
  JobConfig copy = c;
  for (const auto& f : config_fields(copy)) {
    if (auto* value = std::get_if<double*>(&f.target)) {
      require(std::isfinite(**value), fmt::format("{} must be a finite number (got {})", f.dotted(), **value));
    }
  }
  const auto& t = c.training;
  models::model_flavor(c.model.name, c.model.flavor);  // a ConfigError naming model.name or model.flavor
  if (c.activation_checkpoint.mode == ActivationCheckpointMode::kSelective) selective_ac(c.activation_checkpoint);
  require(c.model.rope_theta >= 0, fmt::format("model.rope_theta must be > 0, or 0 for the flavor's (got {})",
                                               c.model.rope_theta));
  require(c.model.norm_eps >= 0, fmt::format("model.norm_eps must be > 0, or 0 for the flavor's (got {})",
                                             c.model.norm_eps));
  require(c.optimizer.name == "AdamW",
          fmt::format("optimizer.name must be AdamW (got '{}')", c.optimizer.name));
  require(c.optimizer.lr > 0, fmt::format("optimizer.lr must be > 0 (got {})", c.optimizer.lr));
  require(c.optimizer.eps > 0, fmt::format("optimizer.eps must be > 0 (got {})", c.optimizer.eps));
  require(c.optimizer.weight_decay >= 0,
          fmt::format("optimizer.weight_decay must be >= 0 (got {})", c.optimizer.weight_decay));
  for (auto [name, beta] : {std::pair{"beta1", c.optimizer.beta1}, {"beta2", c.optimizer.beta2}}) {
    require(beta >= 0 && beta < 1, fmt::format("optimizer.{} must be in [0, 1) (got {})", name, beta));
  }
  require(c.lr_scheduler.warmup_steps >= 0,
          fmt::format("lr_scheduler.warmup_steps must be >= 0 (got {})", c.lr_scheduler.warmup_steps));
  require(c.lr_scheduler.decay_ratio <= 1,
          fmt::format("lr_scheduler.decay_ratio must be <= 1 (got {})", c.lr_scheduler.decay_ratio));
  require(c.lr_scheduler.min_lr_factor >= 0 && c.lr_scheduler.min_lr_factor <= 1,
          fmt::format("lr_scheduler.min_lr_factor must be in [0, 1] (got {})", c.lr_scheduler.min_lr_factor));

  require(t.local_batch_size > 0,
          fmt::format("training.local_batch_size must be > 0 (got {})", t.local_batch_size));
  require(t.seq_len > 0, fmt::format("training.seq_len must be > 0 (got {})", t.seq_len));
  require(t.steps > 0, fmt::format("training.steps must be > 0 (got {})", t.steps));
  if (t.global_batch_size != -1) {
    require(t.global_batch_size > 0 && t.global_batch_size % t.local_batch_size == 0,
            fmt::format("training.global_batch_size must be -1 or a positive multiple of "
                        "training.local_batch_size (got {} with local_batch_size={})",
                        t.global_batch_size, t.local_batch_size));
  }
  require(t.housekeeping_freq > 0,
          fmt::format("training.housekeeping_freq must be > 0 (got {})", t.housekeeping_freq));
  // Output folders: empty would write into the working directory, and a filesystem root (an
  // absolute folder joins as itself) would spread a run's files over it.
  for (auto [key, folder] : {std::pair{"job.dump_folder", c.job.dump_folder}, {"checkpoint.folder", c.checkpoint.folder},
                             {"metrics.save_tb_folder", c.metrics.save_tb_folder},
                             {"profiling.save_traces_folder", c.profiling.save_traces_folder}}) {
    require(!folder.empty(), fmt::format("{} must not be empty", key));
    const auto normal = std::filesystem::path(folder).lexically_normal();
    require(normal != normal.root_path() || normal.empty(),
            fmt::format("{} must not be the filesystem root (got '{}')", key, folder));
  }
  require(c.metrics.log_freq > 0, fmt::format("metrics.log_freq must be > 0 (got {})", c.metrics.log_freq));
  require(c.profiling.profile_freq > 0,
          fmt::format("profiling.profile_freq must be > 0 (got {})", c.profiling.profile_freq));
  require(c.metrics.peak_flops >= 0,
          fmt::format("metrics.peak_flops must be >= 0 (got {})", c.metrics.peak_flops));
  require(c.validation.freq > 0, fmt::format("validation.freq must be > 0 (got {})", c.validation.freq));
  require(c.validation.steps > 0, fmt::format("validation.steps must be > 0 (got {})", c.validation.steps));
  const auto& p = c.parallelism;
  require(p.data_parallel_replicate_degree >= 1,
          fmt::format("parallelism.data_parallel_replicate_degree must be >= 1 (got {})", p.data_parallel_replicate_degree));
  require(p.data_parallel_shard_degree == -1 || p.data_parallel_shard_degree >= 1,
          fmt::format("parallelism.data_parallel_shard_degree must be -1 or >= 1 (got {})", p.data_parallel_shard_degree));
  require(p.tensor_parallel_degree >= 1,
          fmt::format("parallelism.tensor_parallel_degree must be >= 1 (got {})", p.tensor_parallel_degree));
  require(p.pipeline_parallel_degree >= 1,
          fmt::format("parallelism.pipeline_parallel_degree must be >= 1 (got {})", p.pipeline_parallel_degree));
  for (auto [key, v] : {std::pair{"load_balance_coeff", c.model.load_balance_coeff},
                        {"capacity_factor", c.model.capacity_factor}, {"aux_loss_alpha", c.model.aux_loss_alpha}}) {
    require(std::isfinite(v) && v < 1e6, fmt::format("model.{} must be a finite number below 1e6 (got {})", key, v));
  }
  require(p.expert_parallel_degree >= 1,
          fmt::format("parallelism.expert_parallel_degree must be >= 1 (got {})", p.expert_parallel_degree));
  require(p.context_parallel_degree >= 1,
          fmt::format("parallelism.context_parallel_degree must be >= 1 (got {})", p.context_parallel_degree));
  // Head-tail load balancing cuts every sequence into 2 x cp equal chunks (parallel/cp/load_balance.h).
  // (A degree beyond 2^24 is left to check_size_ranges, which names it.)
  require(p.context_parallel_degree == 1 || p.context_parallel_degree > (int64_t(1) << 24) ||
              c.training.seq_len % (2 * p.context_parallel_degree) == 0,
          fmt::format("training.seq_len {} is not divisible by 2 x parallelism.context_parallel_degree ({}): "
                      "context parallelism cuts each sequence into 2 x cp equal chunks",
                      c.training.seq_len, p.context_parallel_degree));
  // Sequence-parallel TP splits each cp rank's T / cp tokens (said here, naming both degrees).
  require(p.context_parallel_degree == 1 || p.tensor_parallel_degree <= 1 ||
              (c.training.seq_len / p.context_parallel_degree) % p.tensor_parallel_degree == 0,
          fmt::format("training.seq_len {} / parallelism.context_parallel_degree {} = {} tokens per cp rank is not "
                      "divisible by parallelism.tensor_parallel_degree {} (sequence parallelism splits them)",
                      c.training.seq_len, p.context_parallel_degree,
                      c.training.seq_len / std::max<int64_t>(p.context_parallel_degree, 1), p.tensor_parallel_degree));
  require(p.pipeline_parallel_microbatch_size >= 1,
          fmt::format("parallelism.pipeline_parallel_microbatch_size must be >= 1 (got {})", p.pipeline_parallel_microbatch_size));
  require(p.pipeline_parallel_layers_per_stage == -1 || p.pipeline_parallel_layers_per_stage >= 1,
          fmt::format("parallelism.pipeline_parallel_layers_per_stage must be -1 or >= 1 (got {})",
                      p.pipeline_parallel_layers_per_stage));
  for (auto [key, v] : {std::pair{"first", p.pipeline_parallel_first_stage_less_layers},
                        {"last", p.pipeline_parallel_last_stage_less_layers}}) {
    require(v >= 0, fmt::format("parallelism.pipeline_parallel_{}_stage_less_layers must be >= 0 (got {})", key, v));
  }
  require(p.bucket_cap_mb > 0, fmt::format("parallelism.bucket_cap_mb must be > 0 (got {})", p.bucket_cap_mb));
  require(c.comm.link_gbytes_per_s >= 0,
          fmt::format("comm.link_gbytes_per_s must be >= 0 (got {})", c.comm.link_gbytes_per_s));
  require(c.comm.init_timeout_seconds > 0,
          fmt::format("comm.init_timeout_seconds must be > 0 (got {})", c.comm.init_timeout_seconds));
  require(c.comm.train_timeout_seconds > 0,
          fmt::format("comm.train_timeout_seconds must be > 0 (got {})", c.comm.train_timeout_seconds));
  const auto& ck = c.checkpoint;
  require(!ck.folder.empty(), "checkpoint.folder must not be empty");
  require(ck.interval > 0, fmt::format("checkpoint.interval must be > 0 (got {})", ck.interval));
  require(ck.load_step >= -1, fmt::format("checkpoint.load_step must be -1 or >= 0 (got {})", ck.load_step));
  require(!ck.keep_best || c.validation.enable, "checkpoint.keep_best needs validation.enable = true");
  require(ck.keep_latest_k >= 0, fmt::format("checkpoint.keep_latest_k must be >= 0 (got {})", ck.keep_latest_k));
  require(c.ps.batch_size == -1 || c.ps.batch_size >= 1,
          fmt::format("ps.batch_size must be -1 or >= 1 (got {})", c.ps.batch_size));
  for (auto [key, v] : {std::pair{"dim", c.model.dim}, {"n_layers", c.model.n_layers},
                        {"n_heads", c.model.n_heads}, {"n_kv_heads", c.model.n_kv_heads},
                        {"vocab_size", c.model.vocab_size}, {"head_dim", c.model.head_dim},
                        {"hidden_dim", c.model.hidden_dim}, {"num_experts", c.model.num_experts},
                        {"top_k", c.model.top_k}, {"moe_hidden_dim", c.model.moe_hidden_dim}}) {
    require(v >= 0, fmt::format("model.{} must be >= 0 (got {}; 0 keeps the flavor's value)", key, v));
  }
  check_size_ranges(c);
  check_datasets(c);
}

namespace {

void check_datasets(const JobConfig& c) {
  const auto& t = c.training;
  require(!t.dataset_text_column.empty(), "training.dataset_text_column must not be empty");
  if (t.datasets.empty()) return;
  require(t.dataset_path.empty(), "set training.dataset_path or [[training.datasets]] (a mixture), not both");
  require(!c.validation.enable || !c.validation.dataset_path.empty(),
          "validation.dataset_path must be set when training.datasets is a mixture (it is not a validation set)");
  std::vector<std::string> formats = {"auto"};
  for (const auto& name : data::dataset_format_names()) formats.push_back(name);
  for (size_t i = 0; i < t.datasets.size(); ++i) {
    const auto& s = t.datasets[i];
    const std::string key = fmt::format("training.datasets[{}]", i);
    require(std::isfinite(s.weight) && s.weight > 0,
            fmt::format("{}.weight must be a finite number > 0 (got {})", key, s.weight));
    const std::vector<std::string> all_but_last(formats.begin(), formats.end() - 1);
    require(std::find(formats.begin(), formats.end(), s.format) != formats.end(),
            fmt::format("{}.format must be {} or {} (got '{}')", key, fmt::join(all_but_last, ", "), formats.back(),
                        s.format));
    require(!s.text_column.empty(), fmt::format("{}.text_column must not be empty", key));
    // Each name is a metrics field (data_tokens/<name>): two sources must not write one.
    for (size_t j = 0; j < i && !s.name.empty(); ++j) {
      require(t.datasets[j].name != s.name,
              fmt::format("{}.name '{}' is training.datasets[{}]'s too; names must differ", key, s.name, j));
    }
  }
}

// Upper bounds far beyond any model or job trained today, so that no size, and no product of two
// of them, overflows 64 bits before the memory check (estimate/memory_floor.h) refuses what does
// not fit; a timeout beyond a week would overflow c10d's nanosecond clocks and means "never".
void check_size_ranges(const JobConfig& c) {
  constexpr int64_t kWeek = 7 * 24 * 3600;
  const auto at_most = [](const std::string& key, int64_t v, int64_t max, const char* why) {
    require(v <= max, fmt::format("{} must be at most {} ({}; got {})", key, max, why, v));
  };
  const auto& m = c.model;
  at_most("model.dim", m.dim, int64_t(1) << 20, "2^20");
  at_most("model.n_layers", m.n_layers, int64_t(1) << 16, "2^16");
  at_most("model.n_heads", m.n_heads, int64_t(1) << 16, "2^16");
  at_most("model.n_kv_heads", m.n_kv_heads, int64_t(1) << 16, "2^16");
  at_most("model.head_dim", m.head_dim, int64_t(1) << 16, "2^16");
  at_most("model.hidden_dim", m.hidden_dim, int64_t(1) << 24, "2^24");
  at_most("model.vocab_size", m.vocab_size, int64_t(1) << 26, "2^26");
  at_most("model.num_experts", m.num_experts, int64_t(1) << 16, "2^16");
  at_most("model.top_k", m.top_k, int64_t(1) << 16, "2^16");
  at_most("model.moe_hidden_dim", m.moe_hidden_dim, int64_t(1) << 24, "2^24");
  const auto& t = c.training;
  at_most("training.seq_len", t.seq_len, int64_t(1) << 24, "2^24 tokens");
  at_most("training.local_batch_size", t.local_batch_size, int64_t(1) << 24, "2^24 sequences");
  at_most("training.global_batch_size", t.global_batch_size, int64_t(1) << 40, "2^40 sequences");
  at_most("validation.steps", c.validation.steps, int64_t(1) << 40, "2^40");
  const auto& p = c.parallelism;
  for (auto [key, v] : {std::pair{"data_parallel_replicate_degree", p.data_parallel_replicate_degree},
                        {"data_parallel_shard_degree", p.data_parallel_shard_degree},
                        {"tensor_parallel_degree", p.tensor_parallel_degree},
                        {"context_parallel_degree", p.context_parallel_degree},
                        {"expert_parallel_degree", p.expert_parallel_degree},
                        {"pipeline_parallel_degree", p.pipeline_parallel_degree},
                        {"pipeline_parallel_microbatch_size", p.pipeline_parallel_microbatch_size},
                        {"pipeline_parallel_layers_per_stage", p.pipeline_parallel_layers_per_stage}}) {
    at_most(std::string("parallelism.") + key, v, int64_t(1) << 24, "2^24");
  }
  at_most("parallelism.pipeline_parallel_first_stage_less_layers", p.pipeline_parallel_first_stage_less_layers,
          int64_t(1) << 16, "2^16");
  at_most("parallelism.pipeline_parallel_last_stage_less_layers", p.pipeline_parallel_last_stage_less_layers,
          int64_t(1) << 16, "2^16");
  // Step counts and intervals: 2^40 steps is 35 years at 1000 steps a second, and no step
  // arithmetic (step + interval, warmup + decay steps) overflows below it.
  for (auto [key, v] : {std::pair{"training.steps", t.steps}, {"lr_scheduler.warmup_steps", c.lr_scheduler.warmup_steps},
                        {"training.housekeeping_freq", t.housekeeping_freq}, {"metrics.log_freq", c.metrics.log_freq},
                        {"profiling.profile_freq", c.profiling.profile_freq}, {"validation.freq", c.validation.freq},
                        {"checkpoint.interval", c.checkpoint.interval}, {"checkpoint.load_step", c.checkpoint.load_step},
                        {"checkpoint.keep_latest_k", c.checkpoint.keep_latest_k}}) {
    at_most(key, v, int64_t(1) << 40, "2^40 steps");
  }
  at_most("ps.batch_size", c.ps.batch_size, int64_t(1) << 24, "2^24 pushes");
  at_most("comm.init_timeout_seconds", c.comm.init_timeout_seconds, kWeek, "a week");
  at_most("comm.train_timeout_seconds", c.comm.train_timeout_seconds, kWeek, "a week");
  require(c.ps.round_timeout_seconds <= double(kWeek),
          fmt::format("ps.round_timeout_seconds must be at most {} (a week; got {})", kWeek, c.ps.round_timeout_seconds));
}

}  // namespace
}  // namespace ctitan::config
