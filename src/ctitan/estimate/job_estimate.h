#pragma once
// `ctitan estimate`: a training job's per-rank memory, FLOPs per token and step time, computed
// from the model shape, the parallel layout and a hardware description alone (no tensors, no
// devices). docs/PERFORMANCE.md ("ctitan estimate") states the assumptions and the measured errors.
//
// Memory is a walk through one training step that adds and frees, in order, every tensor the
// step's operators allocate, and keeps the peak:
// - on a CPU, ctitan's own step (fused kernels in ops/, autocast, FSDP/DDP buffers), tensor by
//   tensor, so that it reproduces the counting allocator's `memory_peak_bytes`;
// - on a GPU, torchtitan's step (PyTorch's ops, FSDP2, TP, PP, activation checkpointing), block by
//   block, counting live tensors (a caching allocator reserves more: fragmentation is not modelled).
// Time is matmul FLOPs at an achievable share of the peak, plus element-wise memory traffic, plus
// the communication that does not overlap compute, plus the pipeline bubble.
#include <cstdint>
#include <string>

#include "ctitan/config/job_config.h"
#include "ctitan/estimate/hardware_profiles.h"
#include "ctitan/models/common/model_args.h"

namespace ctitan::estimate {

enum class ActivationCheckpoint { kNone, kSelectiveOp, kFull };  // torchtitan's none | selective (op) | full
enum class PipelineSchedule { k1F1B, kInterleaved1F1B };

struct ParallelDegrees {
  int64_t dp_replicate = 1;  // DDP, or HSDP's replicas
  int64_t dp_shard = 1;      // FSDP
  int64_t tp = 1;            // tensor (+ sequence) parallel
  int64_t pp = 1;            // pipeline stages
  int64_t world() const { return dp_replicate * dp_shard * tp * pp; }
};

struct JobShape {
  models::ModelArgs model;
  int64_t local_batch_size = 1;  // sequences per dp rank per microbatch of gradient accumulation
  int64_t seq_len = 2048;        // tokens per sequence each rank computes: training.seq_len / cp
  // Context parallelism: each rank holds seq_len of a sequence cp times longer, whose keys its
  // attention spans; `degrees.dp_shard` then counts FSDP's dp_shard x cp ranks.
  int64_t cp = 1;
  int64_t grad_accum_steps = 1;  // microbatches per optimizer step (training.global_batch_size)
  ParallelDegrees degrees;
  bool bf16 = true;              // training.mixed_precision_param: bf16 compute, fp32 master weights
  bool reduce_bf16 = false;      // training.mixed_precision_reduce
  config::ReshardAfterForward reshard_after_forward = config::ReshardAfterForward::kDefault;
  config::GradientSync gradient_sync = config::GradientSync::kEveryMicrobatch;
  // GPU (torchtitan) only: ctitan implements none of these yet.
  ActivationCheckpoint ac = ActivationCheckpoint::kNone;
  PipelineSchedule pp_schedule = PipelineSchedule::k1F1B;
  int64_t pp_microbatches = 0;   // 0: torchtitan's default, one per pipeline stage (pp)
  bool compile = false;          // torch.compile per block: element-wise chains fused
  bool float8 = false;           // float8 linears in the blocks (torchao), float8 FSDP all-gather
  bool async_tp = false;         // TP collectives overlapped with the matmuls next to them
};

// A JobShape from a job config (its [training] and [parallelism] keys) and the model it builds
// (train::model_args_from_config). `world_size` resolves data_parallel_shard_degree = -1.
JobShape job_shape_from_config(const config::JobConfig& config, const models::ModelArgs& model,
                               int64_t world_size);

// Whether the CPU walk follows `config`'s step tensor by tensor (within 2% of the measured peak):
// ctitan's step of a dense model with standard attention, without TP, PP or activation
// checkpointing. Otherwise it would overestimate (or, for experts and latent attention, which
// it does not model, miss what they hold).
bool cpu_walk_follows(const config::JobConfig& config, const models::ModelArgs& model);

// Throws InputError naming the flag or key when degrees do not divide the model or the batch,
// or when a CPU profile is asked for what ctitan cannot run (TP, PP, AC, float8, compile).
void validate_job(const JobShape& job, const HardwareProfile& hw);

// The worst rank's bytes at its peak, split by what holds them; the parts add up to peak_bytes.
struct MemoryEstimate {
  int64_t params_bytes = 0;        // fp32 master weights (shards) + gathered / bf16-cast copies in use
  int64_t grads_bytes = 0;         // fp32 gradients (shards) + unsharded gradients not yet reduced
  int64_t optimizer_bytes = 0;     // AdamW exp_avg + exp_avg_sq
  int64_t activations_bytes = 0;   // saved for backward + the step's working tensors (logits, loss, grads of activations)
  int64_t comm_buffers_bytes = 0;  // all-gather / reduce-scatter buffers, DDP buckets, pooled scratch
  int64_t other_bytes = 0;         // RoPE tables, the batch
  int64_t peak_bytes = 0;
  std::string peak_at;             // where in the step the peak falls, e.g. "backward: layers.5 SwiGLU"
  int64_t pipeline_rank = 0;      // the worst rank's pipeline rank (0 without PP)
  // What stays allocated from one step to the next on that rank: fp32 master weights, their fp32
  // gradients, AdamW's two fp32 moments; 16 bytes per parameter over the shards.
  int64_t state_params_bytes = 0;
  int64_t state_grads_bytes = 0;
  int64_t state_optimizer_bytes = 0;
};

struct ThroughputEstimate {
  double flops_per_token = 0;           // torchtitan's count (models/common/flops.h): what MFU counts
  double executed_flops_per_token = 0;  // + recomputation; attention counted causally (half)
  double matmul_seconds = 0;            // per step, per GPU
  double elementwise_seconds = 0;       // norms, RoPE, SwiGLU, residuals, loss, float8 casts: memory-bound
  double fsdp_exposed_seconds = 0;      // FSDP / DDP traffic compute does not hide
  double tp_exposed_seconds = 0;
  double pp_p2p_seconds = 0;
  double bubble_seconds = 0;            // pipeline fill and drain
  double step_seconds = 0;
  double tokens_per_second_per_gpu = 0; // torchtitan's tps: a dp rank's tokens / step time / (tp * pp)
  double mfu_pct = 0;                   // flops_per_token * tps / peak bf16
  // Per-step volumes each GPU sends, for the report.
  double fsdp_bytes = 0, tp_bytes = 0, pp_bytes = 0;
};

struct JobEstimate {
  MemoryEstimate memory;
  ThroughputEstimate throughput;
  int64_t capacity_bytes = 0;  // hw.memory_bytes
  bool fits = false;           // peak_bytes <= capacity_bytes
};

JobEstimate estimate_job(const JobShape& job, const HardwareProfile& hw);

// The separate terms, for tests and the table.
MemoryEstimate estimate_memory(const JobShape& job, const HardwareProfile& hw);
ThroughputEstimate estimate_throughput(const JobShape& job, const HardwareProfile& hw);

}  // namespace ctitan::estimate
