#include "ctitan/config/config_fields.h"

namespace ctitan::config {

std::vector<Field> config_fields(JobConfig& c) {
  return {
      {"job", "dump_folder", &c.job.dump_folder},
      {"job", "description", &c.job.description},
      {"job", "print_config", &c.job.print_config},

      {"model", "name", &c.model.name},
      {"model", "flavor", &c.model.flavor},
      {"model", "tokenizer_path", &c.model.tokenizer_path},
      {"model", "dim", &c.model.dim},
      {"model", "n_layers", &c.model.n_layers},
      {"model", "n_heads", &c.model.n_heads},
      {"model", "n_kv_heads", &c.model.n_kv_heads},
      {"model", "vocab_size", &c.model.vocab_size},
      {"model", "rope_theta", &c.model.rope_theta},
      {"model", "norm_eps", &c.model.norm_eps},

      {"optimizer", "name", &c.optimizer.name},
      {"optimizer", "lr", &c.optimizer.lr},
      {"optimizer", "eps", &c.optimizer.eps},
      {"optimizer", "weight_decay", &c.optimizer.weight_decay},
      {"optimizer", "beta1", &c.optimizer.beta1},
      {"optimizer", "beta2", &c.optimizer.beta2},

      {"lr_scheduler", "warmup_steps", &c.lr_scheduler.warmup_steps},
      {"lr_scheduler", "decay_ratio", &c.lr_scheduler.decay_ratio},
      {"lr_scheduler", "decay_type", &c.lr_scheduler.decay_type},
      {"lr_scheduler", "min_lr_factor", &c.lr_scheduler.min_lr_factor},

      {"training", "local_batch_size", &c.training.local_batch_size},
      {"training", "global_batch_size", &c.training.global_batch_size},
      {"training", "seq_len", &c.training.seq_len},
      {"training", "steps", &c.training.steps},
      {"training", "max_norm", &c.training.max_norm},
      {"training", "dataset", &c.training.dataset},
      {"training", "dataset_path", &c.training.dataset_path},
      {"training", "mixed_precision_param", &c.training.mixed_precision_param},
      {"training", "mixed_precision_reduce", &c.training.mixed_precision_reduce},
      {"training", "housekeeping_freq", &c.training.housekeeping_freq},

      {"debug", "seed", &c.debug.seed},
      {"debug", "deterministic", &c.debug.deterministic},
      {"debug", "check_leaks", &c.debug.check_leaks},

      {"metrics", "log_freq", &c.metrics.log_freq},
      {"metrics", "peak_flops", &c.metrics.peak_flops},
      {"metrics", "enable_jsonl", &c.metrics.enable_jsonl},

      {"profiling", "enable_profiling", &c.profiling.enable_profiling},
      {"profiling", "profile_freq", &c.profiling.profile_freq},
      {"profiling", "save_traces_folder", &c.profiling.save_traces_folder},

      {"validation", "enable", &c.validation.enable},
      {"validation", "freq", &c.validation.freq},
      {"validation", "steps", &c.validation.steps},
      {"validation", "dataset", &c.validation.dataset},
      {"validation", "dataset_path", &c.validation.dataset_path},

      {"parallelism", "data_parallel_replicate_degree", &c.parallelism.data_parallel_replicate_degree},
      {"parallelism", "data_parallel_shard_degree", &c.parallelism.data_parallel_shard_degree},
      {"parallelism", "tensor_parallel_degree", &c.parallelism.tensor_parallel_degree},
      {"parallelism", "bucket_cap_mb", &c.parallelism.bucket_cap_mb},
      {"parallelism", "fsdp_reshard_after_forward", &c.parallelism.fsdp_reshard_after_forward},
      {"parallelism", "fsdp_gradient_sync", &c.parallelism.fsdp_gradient_sync},

      {"comm", "init_timeout_seconds", &c.comm.init_timeout_seconds},
      {"comm", "train_timeout_seconds", &c.comm.train_timeout_seconds},

      {"checkpoint", "enable", &c.checkpoint.enable},
      {"checkpoint", "folder", &c.checkpoint.folder},
      {"checkpoint", "interval", &c.checkpoint.interval},
      {"checkpoint", "load_step", &c.checkpoint.load_step},
      {"checkpoint", "keep_latest_k", &c.checkpoint.keep_latest_k},
      {"checkpoint", "async_mode", &c.checkpoint.async_mode},
      {"checkpoint", "last_save_model_only", &c.checkpoint.last_save_model_only},
      {"checkpoint", "export_dtype", &c.checkpoint.export_dtype},
      {"checkpoint", "enable_first_step_checkpoint", &c.checkpoint.enable_first_step_checkpoint},
      {"checkpoint", "create_seed_checkpoint", &c.checkpoint.create_seed_checkpoint},
      {"checkpoint", "initial_load_path", &c.checkpoint.initial_load_path},
      {"checkpoint", "initial_load_model_only", &c.checkpoint.initial_load_model_only},
  };
}

}  // namespace ctitan::config
