#include "ctitan/config/config_fields.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "ctitan/common/dtype_names.h"
#include "ctitan/data/dataset_format.h"

namespace ctitan::config {
namespace {

template <typename T>
using NameTable = std::vector<std::pair<T, std::string>>;

const NameTable<DecayType> kDecayTypes = {
    {DecayType::kLinear, "linear"}, {DecayType::kSqrt, "sqrt"}, {DecayType::kCosine, "cosine"}};
const NameTable<ReshardAfterForward> kReshardModes = {{ReshardAfterForward::kDefault, "default"},
                                                      {ReshardAfterForward::kAlways, "always"},
                                                      {ReshardAfterForward::kNever, "never"}};
const NameTable<GradientSync> kGradientSyncs = {{GradientSync::kEveryMicrobatch, "every_microbatch"},
                                                {GradientSync::kLastMicrobatch, "last_microbatch"}};
const NameTable<CpRotateMethod> kCpRotateMethods = {{CpRotateMethod::kAllGather, "allgather"},
                                                   {CpRotateMethod::kAllToAll, "alltoall"}};
const NameTable<AsyncMode> kAsyncModes = {{AsyncMode::kDisabled, "disabled"}, {AsyncMode::kAsync, "async"}};
const NameTable<ActivationCheckpointMode> kAcModes = {{ActivationCheckpointMode::kNone, "none"},
                                                      {ActivationCheckpointMode::kFull, "full"},
                                                      {ActivationCheckpointMode::kSelective, "selective"}};
const NameTable<PsMode> kPsModes = {{PsMode::kGradients, "gradients"}, {PsMode::kDistAutograd, "dist_autograd"}};
const NameTable<DeviceChoice> kDeviceChoices = {
    {DeviceChoice::kAuto, "auto"}, {DeviceChoice::kCpu, "cpu"}, {DeviceChoice::kCuda, "cuda"}};

NameTable<c10::ScalarType> dtypes(std::initializer_list<c10::ScalarType> allowed) {
  NameTable<c10::ScalarType> table;
  for (auto dtype : allowed) table.emplace_back(dtype, *dtype_name(dtype));
  return table;
}

template <typename T>
Choice choice(T* member, const NameTable<T>& table) {
  Choice c;
  for (const auto& [value, name] : table) c.names.push_back(name);
  c.set = [member, table](size_t i) { *member = table.at(i).first; };
  c.current = [member, table] {
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i].first == *member) return i;
    }
    // A value outside the table was set by code, not parsed: printing it as another name would
    // change the printed config (and its hash) silently.
    throw std::logic_error("config: a choice member holds a value its table does not name");
  };
  return c;
}

// A string key whose value is one of `names` (the dataset registry's, which grows without this
// file changing); `aliases` are accepted and stored as the name they stand for.
Choice string_choice(std::string* member, std::vector<std::string> names,
                     std::vector<std::pair<std::string, std::string>> aliases = {}) {
  Choice c;
  c.names = names;
  for (const auto& [alias, _] : aliases) c.names.push_back(alias);
  c.set = [member, names, aliases](size_t i) { *member = i < names.size() ? names[i] : aliases[i - names.size()].second; };
  c.current = [member, names] {
    auto it = std::find(names.begin(), names.end(), *member);
    if (it == names.end()) throw std::logic_error("config: a choice member holds a value its table does not name");
    return size_t(it - names.begin());
  };
  return c;
}

std::vector<std::string> with_registry_formats(std::vector<std::string> names) {
  for (auto& name : data::dataset_format_names()) names.push_back(name);
  return names;
}

template <typename T>
std::string name_in(const NameTable<T>& table, T value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}

}  // namespace

std::string value_text(const Field& f) {
  struct Visitor {
    std::string operator()(int64_t* v) const { return fmt::format("{}", *v); }
    std::string operator()(double* v) const { return fmt::format("{}", *v); }
    std::string operator()(bool* v) const { return fmt::format("{}", *v); }
    std::string operator()(std::string* v) const { return fmt::format("\"{}\"", *v); }
    std::string operator()(StringTable* v) const { return fmt::format("{}", *v); }
    std::string operator()(DatasetSources* v) const {
      std::vector<std::string> entries;
      for (const auto& s : *v) entries.push_back(dataset_source_text(s));
      return fmt::format("[{}]", fmt::join(entries, ", "));
    }
    std::string operator()(const Choice& c) const { return c.names.at(c.current()); }
  };
  return std::visit(Visitor{}, f.target);
}

std::string Choice::allowed() const {
  std::vector<std::string> shown;  // an empty name is a legacy alias, accepted but not offered
  for (const auto& name : names) {
    if (!name.empty()) shown.push_back(name);
  }
  std::string out;
  for (size_t i = 0; i < shown.size(); ++i) {
    out += shown[i];
    if (i + 2 < shown.size()) out += ", ";
    else if (i + 2 == shown.size()) out += " or ";
  }
  return out;
}

std::string name_of(DecayType v) { return name_in(kDecayTypes, v); }
std::string name_of(ReshardAfterForward v) { return name_in(kReshardModes, v); }
std::string name_of(GradientSync v) { return name_in(kGradientSyncs, v); }
std::string name_of(CpRotateMethod v) { return name_in(kCpRotateMethods, v); }
std::string name_of(DeviceChoice v) { return name_in(kDeviceChoices, v); }
std::string name_of(PsMode v) { return name_in(kPsModes, v); }
std::string dataset_source_text(const DatasetSource& s) {
  return fmt::format("{{path = \"{}\", format = \"{}\", weight = {}, text_column = \"{}\", name = \"{}\"}}", s.path,
                     s.format, s.weight, s.text_column, s.name);
}
std::string name_of(AsyncMode v) { return name_in(kAsyncModes, v); }
std::string name_of(ActivationCheckpointMode v) { return name_in(kAcModes, v); }

std::vector<Field> config_fields(JobConfig& c) {
  return {
      {"job", "dump_folder", &c.job.dump_folder, "output folder: metrics.jsonl, checkpoints, traces, TensorBoard"},
      {"job", "description", &c.job.description, "free text, printed at startup"},
      {"job", "print_config", &c.job.print_config, "print the resolved config as TOML at startup"},

      {"model", "name", &c.model.name, "model family: llama3 | qwen3"},
      {"model", "flavor", &c.model.flavor, "model size; llama3: debugmodel | 134M | 8B | 70B | 405B; qwen3: debugmodel | 0.6B | 1.7B | 4B | 8B | 14B | 32B"},
      {"model", "tokenizer_path", &c.model.tokenizer_path, "tiktoken rank file (tokenizer.model), tokenizer.json, or a directory with either"},
      {"model", "dim", &c.model.dim, "model width; 0 keeps the flavor's"},
      {"model", "n_layers", &c.model.n_layers, "transformer blocks; 0 keeps the flavor's"},
      {"model", "n_heads", &c.model.n_heads, "attention heads; 0 keeps the flavor's"},
      {"model", "n_kv_heads", &c.model.n_kv_heads, "key/value heads (GQA); 0 keeps the flavor's"},
      {"model", "vocab_size", &c.model.vocab_size, "vocabulary size (at least the tokenizer's); 0 keeps the flavor's"},
      {"model", "head_dim", &c.model.head_dim, "attention head width; 0 keeps the flavor's (dim / n_heads for llama3)"},
      {"model", "hidden_dim", &c.model.hidden_dim, "feed-forward width; 0 keeps the flavor's"},
      {"model", "rope_theta", &c.model.rope_theta, "RoPE base; 0 keeps the flavor's"},
      {"model", "norm_eps", &c.model.norm_eps, "RMSNorm epsilon; 0 keeps the flavor's"},
      {"model", "num_experts", &c.model.num_experts, "MoE: routed experts per layer; 0 keeps the flavor's"},
      {"model", "top_k", &c.model.top_k, "MoE: experts each token is routed to; 0 keeps the flavor's"},
      {"model", "moe_hidden_dim", &c.model.moe_hidden_dim, "MoE: each expert's SwiGLU width; 0 keeps the flavor's"},
      {"model", "capacity_factor", &c.model.capacity_factor, "MoE: each expert takes at most capacity_factor x its even share of a forward's choices, the rest dropped; 0 drops none, < 0 keeps the flavor's"},
      {"model", "aux_loss_alpha", &c.model.aux_loss_alpha, "MoE: weight of DeepSeek-V3's sequence-wise balance loss added to the training loss; 0 none, < 0 keeps the flavor's"},
      {"model", "load_balance_coeff", &c.model.load_balance_coeff, "MoE: step of the experts' selection bias (auxiliary-loss-free balancing); 0 off, < 0 keeps the flavor's"},

      {"optimizer", "name", &c.optimizer.name, "only AdamW"},
      {"optimizer", "lr", &c.optimizer.lr, "peak learning rate"},
      {"optimizer", "eps", &c.optimizer.eps, "AdamW epsilon"},
      {"optimizer", "weight_decay", &c.optimizer.weight_decay, "decoupled weight decay, applied to every parameter"},
      {"optimizer", "beta1", &c.optimizer.beta1, "first-moment decay"},
      {"optimizer", "beta2", &c.optimizer.beta2, "second-moment decay"},

      {"lr_scheduler", "warmup_steps", &c.lr_scheduler.warmup_steps, "linear warmup length"},
      {"lr_scheduler", "decay_ratio", &c.lr_scheduler.decay_ratio, "fraction of steps spent decaying; < 0 means all after warmup"},
      {"lr_scheduler", "decay_type", choice(&c.lr_scheduler.decay_type, kDecayTypes), "shape of the decay after warmup and the stable phase"},
      {"lr_scheduler", "min_lr_factor", &c.lr_scheduler.min_lr_factor, "lr never drops below min_lr_factor * lr"},

      {"training", "local_batch_size", &c.training.local_batch_size, "sequences per microbatch on this rank"},
      {"training", "global_batch_size", &c.training.global_batch_size, "sequences per optimizer step over all ranks; -1 = local"},
      {"training", "seq_len", &c.training.seq_len, "tokens per sequence"},
      {"training", "steps", &c.training.steps, "optimizer steps to run"},
      {"training", "max_norm", &c.training.max_norm, "gradient clipping threshold (global L2 norm); <= 0 disables"},
      {"training", "dataset", string_choice(&c.training.dataset, with_registry_formats({"auto"})), "file format: auto (by extension) or one for every file"},
      {"training", "dataset_path", &c.training.dataset_path, "file, directory or glob (shards/*.parquet)"},
      {"training", "dataset_text_column", &c.training.dataset_text_column, "the JSONL field or Parquet column holding the text"},
      {"training", "datasets", &c.training.datasets, "a weighted mixture instead of dataset_path: [[training.datasets]] with path, format, weight, text_column, name"},
      {"training", "mixed_precision_param", choice(&c.training.mixed_precision_param, dtypes({c10::kBFloat16, c10::kFloat})), "compute dtype (FSDP: the all-gather dtype too)"},
      {"training", "mixed_precision_reduce", choice(&c.training.mixed_precision_reduce, dtypes({c10::kFloat, c10::kBFloat16})), "FSDP's gradient reduce-scatter dtype"},
      {"training", "housekeeping_freq", &c.training.housekeeping_freq, "run synchronized housekeeping every N steps (torchtitan gc_freq)"},
      {"training", "device", choice(&c.training.device, kDeviceChoices), "auto (cuda:LOCAL_RANK when a GPU is visible, else cpu) | cpu | cuda"},

      {"debug", "seed", &c.debug.seed, "seeds parameter init and every RNG; any integer"},
      {"debug", "deterministic", &c.debug.deterministic, "use deterministic algorithms only"},
      {"debug", "check_leaks", &c.debug.check_leaks, "at housekeeping steps, fail if live tensor bytes grew"},

      {"metrics", "log_freq", &c.metrics.log_freq, "log every N steps (and the last step)"},
      {"metrics", "peak_flops", &c.metrics.peak_flops, "FLOP/s for MFU; 0 = probe a GEMM at startup (cached)"},
      {"metrics", "enable_jsonl", &c.metrics.enable_jsonl, "write {dump_folder}/metrics.jsonl"},
      {"metrics", "enable_tensorboard", &c.metrics.enable_tensorboard, "write TensorBoard events (rank 0), as torchtitan"},
      {"metrics", "save_tb_folder", &c.metrics.save_tb_folder, "under job.dump_folder, then one YYYYmmdd-HHMM folder per run"},

      {"profiling", "enable_profiling", &c.profiling.enable_profiling, "record an op-level trace of some steps"},
      {"profiling", "profile_freq", &c.profiling.profile_freq, "trace every N-th step (steps N, 2N, ...)"},
      {"profiling", "save_traces_folder", &c.profiling.save_traces_folder, "traces go under job.dump_folder/this"},

      {"ps", "mode", choice(&c.ps.mode, kPsModes), "ctitan ps: gradients (trainers push gradients to rank 0, which steps once per round) | dist_autograd (the embedding on rank 0, distributed autograd and optimizer)"},
      {"ps", "batch_size", &c.ps.batch_size, "ctitan ps: pushes per update; -1 = one from every trainer (the trainer count is the only other value accepted)"},
      {"ps", "round_timeout_seconds", &c.ps.round_timeout_seconds, "ctitan ps: a round not complete by then fails, naming the trainers missing"},
      {"activation_checkpoint", "mode", choice(&c.activation_checkpoint.mode, kAcModes), "recompute blocks' activations in backward: none, full (every block) or selective"},
      {"activation_checkpoint", "selective_ac_option", &c.activation_checkpoint.selective_ac_option, "selective: k checkpoints every k-th block; 'op' checkpoints every block but keeps the outputs of matmuls (every other one), attention and the tp reduce-scatter, recomputing norms, RoPE, SwiGLU and adds"},
      {"validation", "enable", &c.validation.enable, "run a validation loop"},
      {"validation", "freq", &c.validation.freq, "every N training steps (and the last step)"},
      {"validation", "steps", &c.validation.steps, "batches per validation run"},
      // "": the string default before this key was an enum; configs saved in checkpoints hold it.
      {"validation", "dataset", string_choice(&c.validation.dataset, with_registry_formats({"training", "auto"}), {{"", "training"}}), "file format: training (training.dataset's), auto, or one for every file"},
      {"validation", "dataset_path", &c.validation.dataset_path, "defaults to training.dataset_path"},

      {"parallelism", "data_parallel_replicate_degree", &c.parallelism.data_parallel_replicate_degree, "DDP (or HSDP's replica) dimension"},
      {"parallelism", "data_parallel_shard_degree", &c.parallelism.data_parallel_shard_degree, "FSDP dimension; -1 = the ranks left over"},
      {"parallelism", "tensor_parallel_degree", &c.parallelism.tensor_parallel_degree, "TP dimension, innermost on the mesh: Megatron-style column/row-wise linears with sequence parallel"},
      {"parallelism", "context_parallel_degree", &c.parallelism.context_parallel_degree, "CP dimension, between dp_shard and tp: each rank holds 2 of 2 x cp chunks of every sequence, ring attention; FSDP shards over dp_shard x cp"},
      {"parallelism", "expert_parallel_degree", &c.parallelism.expert_parallel_degree, "EP dimension for MoE experts, taken from dp_shard: each rank holds num_experts / ep experts, tokens travel by all-to-all"},
      {"parallelism", "context_parallel_rotate_method", choice(&c.parallelism.context_parallel_rotate_method, kCpRotateMethods), "CP: allgather (every rank's keys at once, gradients reduce-scattered) or alltoall (a ring, one hop per step, overlapped)"},
      {"parallelism", "disable_loss_parallel", &c.parallelism.disable_loss_parallel, "TP: all-gather the vocab-sharded logits and take the ordinary loss, instead of a cross-entropy over the shards"},
      {"parallelism", "enable_async_tensor_parallel", &c.parallelism.enable_async_tensor_parallel, "TP: micro-pipeline each sequence all-gather and reduce-scatter with the matmul beside it, so communication overlaps compute (eager here; torchtitan's needs torch.compile)"},
      {"parallelism", "pipeline_parallel_degree", &c.parallelism.pipeline_parallel_degree, "PP dimension, outermost on the mesh: the layers split into stages, one per rank"},
      {"parallelism", "pipeline_parallel_schedule", &c.parallelism.pipeline_parallel_schedule, "GPipe, 1F1B or Interleaved1F1B (two or more stages per rank, loop style)"},
      {"parallelism", "pipeline_parallel_microbatch_size", &c.parallelism.pipeline_parallel_microbatch_size, "PP: rows per microbatch; microbatches = training.local_batch_size / this"},
      {"parallelism", "pipeline_parallel_layers_per_stage", &c.parallelism.pipeline_parallel_layers_per_stage, "PP: layer slots per stage (sets the stage count); -1 = one stage per rank"},
      {"parallelism", "pipeline_parallel_first_stage_less_layers", &c.parallelism.pipeline_parallel_first_stage_less_layers, "PP: layer slots the embeddings take on the first stage"},
      {"parallelism", "pipeline_parallel_last_stage_less_layers", &c.parallelism.pipeline_parallel_last_stage_less_layers, "PP: layer slots norm and output take on the last stage"},
      {"parallelism", "module_fqns_per_model_part", &c.parallelism.module_fqns_per_model_part, "PP: each stage's modules in forward order, a TOML array of arrays; [] = derived"},
      {"parallelism", "bucket_cap_mb", &c.parallelism.bucket_cap_mb, "DDP gradient bucket size"},
      {"parallelism", "fsdp_reshard_after_forward", choice(&c.parallelism.fsdp_reshard_after_forward, kReshardModes), "FSDP: free a block's gathered parameters after its forward"},
      {"parallelism", "fsdp_gradient_sync", choice(&c.parallelism.fsdp_gradient_sync, kGradientSyncs), "FSDP with accumulation: reduce-scatter every microbatch, or only the last"},

      {"comm", "init_timeout_seconds", &c.comm.init_timeout_seconds, "rendezvous and the first step's collectives"},
      {"comm", "link_gbytes_per_s", &c.comm.link_gbytes_per_s, "the link's GB/s that metrics' bandwidth use divides by; 0 = measure a 64 MiB all-gather at startup"},
      {"comm", "train_timeout_seconds", &c.comm.train_timeout_seconds, "every collective after the first step"},

      {"checkpoint", "enable", &c.checkpoint.enable, "save checkpoints and resume from the newest valid one"},
      {"checkpoint", "folder", &c.checkpoint.folder, "under job.dump_folder; holds step-N/ directories"},
      {"checkpoint", "interval", &c.checkpoint.interval, "save every N steps (and at the last step)"},
      {"checkpoint", "load_step", &c.checkpoint.load_step, "step to resume from; -1 = the newest valid checkpoint"},
      {"checkpoint", "keep_latest_k", &c.checkpoint.keep_latest_k, "keep the newest k complete checkpoints; 0 keeps all"},
      {"checkpoint", "keep_best", &c.checkpoint.keep_best, "also save and keep the step with the best validation loss (best.json)"},
      {"checkpoint", "async_mode", choice(&c.checkpoint.async_mode, kAsyncModes), "async: checkpoints are written by a background thread"},
      {"checkpoint", "last_save_model_only", &c.checkpoint.last_save_model_only, "the save at the last step holds the model only"},
      {"checkpoint", "export_dtype", choice(&c.checkpoint.export_dtype, dtypes({c10::kFloat, c10::kBFloat16, c10::kHalf})), "dtype of model-only saves"},
      {"checkpoint", "enable_first_step_checkpoint", &c.checkpoint.enable_first_step_checkpoint, "also save after step 1"},
      {"checkpoint", "create_seed_checkpoint", &c.checkpoint.create_seed_checkpoint, "write a step-0 model-only checkpoint and exit (1 process)"},
      {"checkpoint", "initial_load_path", &c.checkpoint.initial_load_path, "a step dir to start from when the folder has none"},
      {"checkpoint", "initial_load_model_only", &c.checkpoint.initial_load_model_only, "from initial_load_path, load the model only"},
  };
}

}  // namespace ctitan::config
