#pragma once
// The job configuration: one plain struct per TOML section, named as in torchtitan v0.2.2.
// Parsing and validation live in config_manager.h; this file only says what exists and its default.
// Keys with a fixed set of values are enums or dtypes here, parsed once (config_fields.cpp spells
// their TOML names), so no use site compares strings.
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ctitan::config {

enum class DecayType { kLinear, kSqrt, kCosine };
// FSDP: when a module's gathered parameters are freed after its forward.
enum class ReshardAfterForward {
  kDefault,  // the blocks and embeddings reshard; [norm, output] does not (backward needs it at once)
  kAlways,
  kNever,
};
// FSDP with gradient accumulation: reduce-scatter after each microbatch (least memory) or keep
// unsharded gradients until the last (least traffic).
enum class GradientSync { kEveryMicrobatch, kLastMicrobatch };
// How context parallelism brings every rank's keys and values to each rank (parallel/cp/kv_rotation.h).
enum class CpRotateMethod { kAllGather, kAllToAll };
enum class AsyncMode { kDisabled, kAsync };
enum class ActivationCheckpointMode { kNone, kFull, kSelective };
// Where a rank computes: auto takes cuda:LOCAL_RANK when a GPU is visible, else the CPU.
enum class DeviceChoice { kAuto, kCpu, kCuda };
// ctitan ps: trainers push gradients to the server, or the embedding lives on the server behind
// distributed autograd (docs/RPC.md).
enum class PsMode { kGradients, kDistAutograd };

// One dataset of a weighted mixture: an entry of [[training.datasets]].
struct DatasetSource {
  std::string path;                  // file, directory or glob, as training.dataset_path
  std::string format = "auto";       // as training.dataset
  double weight = 1.0;               // relative probability that the next document comes from here
  std::string text_column = "text";  // as training.dataset_text_column
  std::string name = "";             // in metrics (data_tokens/<name>); "" = the path's last component
  bool operator==(const DatasetSource&) const = default;
};

struct Job {
  std::string dump_folder = "./outputs";  // output folder: metrics.jsonl, checkpoints, traces, TensorBoard
  std::string description = "";           // free text, printed at startup
  bool print_config = false;              // print the resolved config as TOML at startup
};

struct Model {
  std::string name = "llama3";          // model family: llama3 | qwen3 | qwen3_moe | deepseek_v3 (models/model_spec.h)
  std::string flavor = "debugmodel";    // the family's size (models/<family>/flavors.cpp)
  std::string tokenizer_path = "";      // tiktoken rank file (tokenizer.model), tokenizer.json, or a directory with either
  // Optional shape overrides on top of the flavor; 0 keeps the flavor's value. Tests use these
  // to build tiny models without adding flavors.
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;
  int64_t head_dim = 0;     // attention head width, when not dim / n_heads (Qwen3)
  int64_t hidden_dim = 0;   // feed-forward width, instead of the family's rule
  // RoPE base and RMSNorm epsilon; 0 keeps the flavor's. `checkpoint import` sets them from an
  // HF config.json, so a model trained with other values keeps them.
  double rope_theta = 0;
  double norm_eps = 0;
  // MoE shape overrides (a MoE family's flavors only; torchtitan's MoEArgs names): 0 keeps the
  // flavor's; load_balance_coeff < 0 keeps it, 0 turns the selection bias off.
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t moe_hidden_dim = 0;    // each expert's SwiGLU width (torchtitan's moe_inter_dim)
  double load_balance_coeff = -1;
  double capacity_factor = -1;   // > 0: tokens beyond an expert's capacity dropped; 0 none; < 0 the flavor's
  double aux_loss_alpha = -1;    // > 0: the sequence-wise balance loss's weight; 0 none; < 0 the flavor's
};

struct Optimizer {
  std::string name = "AdamW";  // only AdamW
  double lr = 8e-4;            // peak learning rate
  double eps = 1e-8;           // AdamW epsilon
  double weight_decay = 0.1;   // decoupled weight decay, applied to every parameter
  double beta1 = 0.9;          // first-moment decay
  double beta2 = 0.95;         // second-moment decay
};

struct LrScheduler {
  int64_t warmup_steps = 200;            // linear warmup length
  double decay_ratio = -1.0;             // fraction of steps spent decaying; < 0 means all after warmup
  DecayType decay_type = DecayType::kLinear;  // linear | sqrt | cosine
  double min_lr_factor = 0.0;            // lr never drops below min_lr_factor * lr
};

struct Training {
  int64_t local_batch_size = 8;        // sequences per microbatch on this rank
  int64_t global_batch_size = -1;      // sequences per optimizer step over all ranks; -1 = local
  int64_t seq_len = 2048;              // tokens per sequence
  int64_t steps = 10000;               // optimizer steps to run
  double max_norm = 1.0;               // gradient clipping threshold (global L2 norm); <= 0 disables
  // The dataset's format: auto (by extension) or a name of the dataset registry
  // (data/dataset_format.h: text | jsonl | tokens | parquet), for every file.
  std::string dataset = "auto";
  std::string dataset_path = "";       // file, directory or glob (shards/*.parquet)
  std::string dataset_text_column = "text";  // the JSONL field or Parquet column holding the text
  // A weighted mixture instead of dataset_path: [[training.datasets]] entries (data/mixture_stream.h).
  std::vector<DatasetSource> datasets;
  c10::ScalarType mixed_precision_param = c10::kBFloat16;  // bfloat16 | float32: compute dtype
  c10::ScalarType mixed_precision_reduce = c10::kFloat;    // float32 | bfloat16: FSDP's gradient reduction
  int64_t housekeeping_freq = 50;      // run synchronized housekeeping every N steps (torchtitan gc_freq)
  DeviceChoice device = DeviceChoice::kAuto;  // auto | cpu | cuda: cuda means cuda:LOCAL_RANK
};

struct Debug {
  int64_t seed = 0;            // seeds parameter init and every RNG
  bool deterministic = false;  // use deterministic algorithms only
  bool check_leaks = false;    // at housekeeping steps, fail if live tensor bytes grew
};

struct Metrics {
  int64_t log_freq = 10;       // log every N steps (and the last step)
  double peak_flops = 0.0;     // FLOP/s for MFU; 0 = probe a GEMM at startup (cached)
  bool enable_jsonl = true;    // write {dump_folder}/metrics.jsonl
  bool enable_tensorboard = false;    // write TensorBoard events (rank 0), as torchtitan
  std::string save_tb_folder = "tb";  // under job.dump_folder, then one YYYYmmdd-HHMM folder per run
};

struct Profiling {
  bool enable_profiling = false;                     // record an op-level trace of some steps
  int64_t profile_freq = 10;                         // trace every N-th step (steps N, 2N, ...)
  std::string save_traces_folder = "profile_traces";  // under job.dump_folder
};

struct Validation {
  bool enable = false;              // run a validation loop
  int64_t freq = 500;               // every N training steps (and the last step)
  int64_t steps = 10;               // batches per validation run
  std::string dataset = "training";  // training (training.dataset's), auto, or a registry name
  std::string dataset_path = "";    // defaults to training.dataset_path
};

struct Parallelism {
  int64_t data_parallel_replicate_degree = 1;   // DDP (or HSDP's replica) dimension
  int64_t data_parallel_shard_degree = -1;      // FSDP dimension; -1 = the ranks left over
  int64_t tensor_parallel_degree = 1;           // TP dimension (innermost: tp ranks of a group are adjacent)
  bool disable_loss_parallel = false;           // TP: gather the vocab-sharded logits before the loss
  bool enable_async_tensor_parallel = false;    // TP: collectives fused with the matmuls beside them, overlapped
  // Context parallelism (parallel/cp/): each rank of a cp group holds 2 of the 2 x cp chunks of every
  // sequence (head-tail load balancing); attention passes keys and values around the ring.
  int64_t context_parallel_degree = 1;
  CpRotateMethod context_parallel_rotate_method = CpRotateMethod::kAllGather;  // allgather | alltoall (a ring)
  // Expert parallelism (parallel/ep/): MoE experts split over this many of dp_shard's ranks,
  // tokens dispatched to them by all-to-all; FSDP shards each rank's experts over the rest of
  // dp_shard (torchtitan's efsdp). Not with context parallelism.
  int64_t expert_parallel_degree = 1;
  // Pipeline parallelism (parallel/pipeline/): the outermost mesh dimension.
  int64_t pipeline_parallel_degree = 1;
  std::string pipeline_parallel_schedule = "1F1B";   // GPipe | 1F1B | Interleaved1F1B
  int64_t pipeline_parallel_microbatch_size = 1;     // microbatches per step = local_batch_size / this
  int64_t pipeline_parallel_layers_per_stage = -1;   // -1: one stage per rank (two for interleaved)
  int64_t pipeline_parallel_first_stage_less_layers = 1;  // layer slots the embeddings count for
  int64_t pipeline_parallel_last_stage_less_layers = 1;   // layer slots norm + output count for
  // The stages' modules in forward order, overriding the weighted split above, e.g.
  // [["tok_embeddings", "layers.0"], ["layers.1", "norm", "output"]]. Empty: derived.
  std::vector<std::vector<std::string>> module_fqns_per_model_part;
  double bucket_cap_mb = 25.0;                  // DDP gradient bucket size
  ReshardAfterForward fsdp_reshard_after_forward = ReshardAfterForward::kDefault;  // default | always | never
  GradientSync fsdp_gradient_sync = GradientSync::kEveryMicrobatch;  // every_microbatch | last_microbatch
};

struct Comm {
  int64_t init_timeout_seconds = 300;   // rendezvous and the first step's collectives
  int64_t train_timeout_seconds = 100;  // every collective after the first step
  double link_gbytes_per_s = 0;         // link bandwidth for metrics' bandwidth use; 0 = measure at startup
};

// Distributed checkpointing (docs/CHECKPOINT_FORMAT.md). Names and defaults as torchtitan's.
struct Checkpoint {
  bool enable = false;                   // save checkpoints and resume from the newest valid one
  std::string folder = "checkpoint";     // under job.dump_folder; holds step-N/ directories
  int64_t interval = 500;                // save every N steps (and at the last step)
  int64_t load_step = -1;                // step to resume from; -1 = the newest valid checkpoint
  int64_t keep_latest_k = 10;            // keep the newest k complete checkpoints; 0 keeps all
  bool keep_best = false;                // also save and keep the step with the best validation loss
  AsyncMode async_mode = AsyncMode::kDisabled;  // disabled | async (written by a background thread)
  bool last_save_model_only = true;      // the save at the last step holds the model only
  c10::ScalarType export_dtype = c10::kFloat;  // float32 | bfloat16 | float16: dtype of model-only saves
  bool enable_first_step_checkpoint = false;  // also save after step 1
  bool create_seed_checkpoint = false;   // write a step-0 model-only checkpoint and exit (1 process)
  std::string initial_load_path = "";    // a step dir to start from when the folder has none
  bool initial_load_model_only = true;   // from initial_load_path, load the model only
};

// Activation checkpointing, torchtitan's [activation_checkpoint] (parallel/activation_checkpoint.h).
struct ActivationCheckpoint {
  ActivationCheckpointMode mode = ActivationCheckpointMode::kNone;  // none | full | selective
  // selective: an integer k (every k-th block), or "op" (op_selective_checkpoint.h). A string
  // in TOML, as torchtitan's; read it through selective_ac().
  std::string selective_ac_option = "2";
};

// activation_checkpoint.selective_ac_option parsed: operator-level ("op"), or every k-th block.
struct SelectiveAc {
  bool op = false;
  int64_t every = 1;  // k; torchtitan's 0 (every block) reads as 1
};
// A ConfigError naming the key when `option` is neither 'op' nor an integer >= 0.
SelectiveAc selective_ac(const ActivationCheckpoint& ac);

// `ctitan ps` (src/ctitan/ps/): rank 0 serves the parameters, the other ranks train.
struct Ps {
  PsMode mode = PsMode::kGradients;     // gradients (trainers push gradients) | dist_autograd (embedding on the server, docs/RPC.md)
  int64_t batch_size = -1;              // pushes per update; -1 = every trainer's (world size - 1)
  double round_timeout_seconds = 300;   // a round not complete by then fails, naming who has not pushed
};

struct JobConfig {
  Job job;
  Model model;
  Optimizer optimizer;
  LrScheduler lr_scheduler;
  Training training;
  Debug debug;
  Metrics metrics;
  Profiling profiling;
  Validation validation;
  Parallelism parallelism;
  Comm comm;
  Checkpoint checkpoint;
  ActivationCheckpoint activation_checkpoint;
  Ps ps;
};

}  // namespace ctitan::config
