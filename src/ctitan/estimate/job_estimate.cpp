// `ctitan estimate`'s public functions (job_estimate.h) and the time model: FLOPs, element-wise
// memory traffic and communication per step. The memory walks are in cpu_walk.cpp and
// gpu_walk.cpp, the shapes they and the time model share in job_shape.cpp.
#include "ctitan/estimate/job_estimate.h"

#include "ctitan/estimate/memory_floor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/estimate/job_shape.h"
#include "ctitan/estimate/walk.h"
#include "ctitan/models/common/flops.h"

namespace ctitan::estimate {

using detail::block_weights;
using detail::numel;
using detail::pp_microbatches;
using detail::stage_layers;
using detail::stages_per_rank;
using detail::Widths;

namespace {

// ---------------------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------------------

// Device-memory bytes the element-wise work of one block's forward moves per token (before TP
// sharding): each op reads its inputs and writes its output once. Backward moves about twice
// that (saved inputs and the incoming gradient in, a gradient out); recomputation once more.
double elementwise_forward_bytes(const JobShape& job, bool fused) {
  const Widths w(job.model);
  const double d = double(w.d), hd = double(w.hd), kv = double(w.kv), f = double(w.f);
  const double repeat = w.gqa ? 2 * (2 * kv + 2 * hd) : 0;  // repeat_kv copies k and v
  const double residual_adds = 2 * 3 * 2 * d;               // two adds: two bf16 inputs, one output
  if (fused) {
    // One pass per kernel: each norm reads x and writes its output, RoPE reads and writes q and
    // k, SwiGLU reads two hidden tensors and writes one (ctitan's fused kernels, or inductor's).
    return 2 * (2 * d + 2 * d) + 2 * (hd + kv) * 2 + repeat + residual_adds + 3 * 2 * f;
  }
  // Eager: RMSNorm is x.float(), pow, mean, rsqrt, mul, type_as, mul by the weight (about 36
  // bytes per element); RoPE casts q and k to fp32, multiplies as complex and casts back (20);
  // SiLU then the product (10 per hidden element).
  return 2 * 36 * d + 20 * (hd + kv) + repeat + residual_adds + 10 * f;
}

// Float8 (torchao, dynamic scaling) casts every activation and gradient that enters a float8
// matmul: an amax pass (read bf16) and the cast (read bf16, write float8), 5 bytes per element.
// Per token per block: wq, wk, wv each cast the attention_norm output, wo the attention output,
// w1, w3 the ffn_norm output, w2 the SwiGLU output; in backward, the gradients of the seven outputs.
double float8_cast_bytes(const JobShape& job, bool recompute) {
  if (!job.float8) return 0;
  const Widths w(job.model);
  const double d = double(w.d), hd = double(w.hd), kv = double(w.kv), f = double(w.f);
  const double inputs = 3 * d + hd + 2 * d + f, grads = hd + 2 * kv + d + 2 * f + d;
  return 5 * (inputs * (recompute ? 2 : 1) + grads);
}

struct LayerCost {
  double bf16_flops = 0, fp8_flops = 0, hbm_bytes = 0;  // per token, whole layer (before TP)
};

LayerCost layer_cost(const JobShape& job, bool fused) {
  const Widths w(job.model);
  const double lin = double(numel(block_weights(w), /*linear_only=*/true));
  const double T = double(job.seq_len * job.cp);  // the keys a query's attention spans
  double recompute_lin = 0, recompute_attn = 0;
  bool recompute_any = job.ac != ActivationCheckpoint::kNone;
  if (job.ac == ActivationCheckpoint::kFull) {
    recompute_lin = lin;
    recompute_attn = 1;
  } else if (job.ac == ActivationCheckpoint::kSelectiveOp) {
    // The 2nd, 4th and 6th matmuls (wk, wo, w3) are recomputed; SDPA is saved.
    recompute_lin = double(w.kv * w.d + w.d * w.hd + w.f * w.d);
  }
  LayerCost c;
  const double matmul = 6 * lin + 2 * recompute_lin;
  (job.float8 ? c.fp8_flops : c.bf16_flops) += matmul;
  // Attention as the causal kernel computes it: half of torchtitan's 12 * hd * T (forward 2,
  // backward 4), plus a forward again under full AC.
  c.bf16_flops += 6 * double(w.hd) * T + recompute_attn * 2 * double(w.hd) * T;
  c.hbm_bytes = elementwise_forward_bytes(job, fused) * (3 + (recompute_any ? 1 : 0)) +
                float8_cast_bytes(job, recompute_any);
  return c;
}

double collective_bandwidth(const HardwareProfile& hw, int64_t span) {
  return span <= hw.devices_per_node ? hw.intra_node_bytes_per_s : hw.inter_node_bytes_per_s;
}

}  // namespace

bool cpu_walk_follows(const config::JobConfig& config, const models::ModelArgs& model) {
  return model.moe.num_experts == 0 && !model.latent_attention() && config.parallelism.tensor_parallel_degree == 1 && config.parallelism.pipeline_parallel_degree == 1 &&
         config.parallelism.context_parallel_degree == 1 &&
         config.activation_checkpoint.mode == config::ActivationCheckpointMode::kNone;
}

JobShape job_shape_from_config(const config::JobConfig& config, const models::ModelArgs& model,
                               int64_t world_size) {
  JobShape job;
  job.model = model;
  const auto& t = config.training;
  const auto& p = config.parallelism;
  job.local_batch_size = t.local_batch_size;
  job.seq_len = t.seq_len;
  job.degrees.dp_replicate = p.data_parallel_replicate_degree;
  job.degrees.tp = p.tensor_parallel_degree;
  job.degrees.pp = p.pipeline_parallel_degree;
  job.degrees.dp_shard = p.data_parallel_shard_degree;
  const int64_t cp = p.context_parallel_degree;
  if (job.degrees.dp_shard == -1) {
    job.degrees.dp_shard =
        std::max<int64_t>(1, world_size / (job.degrees.pp * job.degrees.dp_replicate * cp * job.degrees.tp));
  }
  const int64_t dp = job.degrees.dp_replicate * job.degrees.dp_shard;
  const int64_t global = t.global_batch_size > 0 ? t.global_batch_size : t.local_batch_size * dp;
  if (global % (t.local_batch_size * dp) != 0) {
    throw ConfigError(fmt::format("training.global_batch_size {} is not divisible by local_batch_size {} x dp degree {}",
                                  global, t.local_batch_size, dp));
  }
  job.grad_accum_steps = global / (t.local_batch_size * dp);
  // Context parallelism, as the estimate sees it: each rank computes T / cp tokens of every
  // sequence, attending to all T keys, and FSDP shards over dp_shard x cp. The rotation's key and
  // value buffers are not modelled (docs/design/context_parallel.md gives their size).
  if (cp > 1) {
    job.cp = cp;
    job.seq_len = t.seq_len / cp;
    job.degrees.dp_shard *= cp;
  }
  job.bf16 = t.mixed_precision_param == c10::kBFloat16;
  job.reduce_bf16 = t.mixed_precision_reduce == c10::kBFloat16;
  job.reshard_after_forward = p.fsdp_reshard_after_forward;
  job.gradient_sync = p.fsdp_gradient_sync;
  return job;
}

void validate_job(const JobShape& job, const HardwareProfile& hw) {
  const auto& g = job.degrees;
  const auto& m = job.model;
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw InputError(message, 2);
  };
  require(g.dp_replicate >= 1 && g.dp_shard >= 1 && g.tp >= 1 && g.pp >= 1,
          fmt::format("--dp-replicate, --dp-shard, --tp and --pp must be >= 1 (got {}, {}, {}, {})", g.dp_replicate,
                      g.dp_shard, g.tp, g.pp));
  require(job.local_batch_size >= 1 && job.seq_len >= 1 && job.grad_accum_steps >= 1,
          "training.local_batch_size and training.seq_len must be >= 1");
  require(m.n_heads % g.tp == 0, fmt::format("--tp {} does not divide model.n_heads {}", g.tp, m.n_heads));
  // As the trainer (parallel::refuse_layouts_the_model_lacks): the head and the embedding are one weight.
  require(!(m.tie_word_embeddings && g.pp > 1),
          fmt::format("--pp {}: model.flavor ties the output layer to tok_embeddings, which pipeline parallelism "
                      "cannot split", g.pp));
  require(m.kv_heads() % g.tp == 0, fmt::format("--tp {} does not divide model.n_kv_heads {}", g.tp, m.kv_heads()));
  require(m.ffn_hidden_dim() % g.tp == 0,
          fmt::format("--tp {} does not divide the FFN hidden size {}", g.tp, m.ffn_hidden_dim()));
  require(m.vocab_size % g.tp == 0, fmt::format("--tp {} does not divide model.vocab_size {}", g.tp, m.vocab_size));
  require(job.seq_len % g.tp == 0,
          fmt::format("training.seq_len {} is not a multiple of --tp {} (sequence parallel)", job.seq_len, g.tp));
  if (g.pp > 1) {
    const int64_t stages = g.pp * stages_per_rank(job), mb = pp_microbatches(job);
    require(m.n_layers >= stages,
            fmt::format("--pp {} with {} gives {} stages, more than model.n_layers {}", g.pp,
                        job.pp_schedule == PipelineSchedule::k1F1B ? "1F1B" : "Interleaved1F1B", stages, m.n_layers));
    require(mb >= g.pp, fmt::format("--pp-microbatches {} is fewer than the {} pipeline ranks: the schedule would hang", mb, g.pp));
    require(job.local_batch_size % mb == 0,
            fmt::format("training.local_batch_size {} is not divisible by --pp-microbatches {}", job.local_batch_size, mb));
  }
  require(hw.peak_flops > 0 && hw.memory_bytes > 0 && hw.memory_bytes_per_s > 0 && hw.intra_node_bytes_per_s > 0 &&
              hw.inter_node_bytes_per_s > 0 && hw.achievable_fraction > 0 && hw.devices_per_node >= 1,
          "--hardware: memory, peak FLOP/s, bandwidths and --gpus-per-node must all be positive");
  if (!hw.is_gpu) {
    // ctitan on a CPU: what it can run, nothing else.
    require(g.tp == 1 && g.pp == 1, "--tp and --pp: the CPU walk follows ctitan's step without TP or PP (both built, neither modelled here); estimate them with a GPU --hardware");
    require(job.ac == ActivationCheckpoint::kNone && !job.float8 && !job.compile && !job.async_tp,
            "--ac, --float8, --compile and --async-tp model torchtitan on a GPU; the CPU walk follows ctitan's step "
            "without activation checkpointing (ctitan's block checkpointing is not modelled yet), float8 or compile");
  } else {
    require(job.bf16, "training.mixed_precision_param float32: the GPU model is of torchtitan's bf16 training only");
    require(!job.async_tp || job.compile, "--async-tp needs --compile (as torchtitan)");
    require(job.grad_accum_steps == 1 || g.pp == 1,
            "training.global_batch_size: gradient accumulation with --pp is not modelled");
  }
}

MemoryEstimate estimate_memory(const JobShape& job, const HardwareProfile& hw) {
  refuse_beyond_the_walk(job);
  auto with_state = [](MemoryEstimate m, double numel) {
    m.state_params_bytes = int64_t(std::llround(4 * numel));
    m.state_grads_bytes = int64_t(std::llround(4 * numel));
    m.state_optimizer_bytes = int64_t(std::llround(8 * numel));
    return m;
  };
  if (!hw.is_gpu) {
    const auto walk = detail::walk_ctitan_cpu(job);
    return with_state(walk.memory, walk.state_numel);
  }
  MemoryEstimate worst;
  for (int64_t rank = 0; rank < job.degrees.pp; ++rank) {
    const auto walk = detail::walk_torchtitan_gpu(job, rank);
    if (walk.memory.peak_bytes > worst.peak_bytes) {
      worst = with_state(walk.memory, walk.state_numel);
      worst.pipeline_rank = rank;
    }
  }
  return worst;
}

ThroughputEstimate estimate_throughput(const JobShape& job, const HardwareProfile& hw) {
  const Widths w(job.model);
  const auto& g = job.degrees;
  const double t = double(g.tp), p = double(g.pp), dp = double(g.dp_shard), R = double(g.dp_replicate);
  const int64_t v = stages_per_rank(job), m = pp_microbatches(job);
  const double seq = double(job.seq_len);
  // Tokens a dp rank processes per optimizer step, and per microbatch.
  const double step_tokens = double(job.local_batch_size) * seq * double(job.grad_accum_steps);
  const double mb_tokens = double(job.local_batch_size) / double(m) * seq;
  const bool fused = !hw.is_gpu || job.compile;

  ThroughputEstimate out;
  out.flops_per_token = models::flops_per_token(job.model, job.seq_len * job.cp);
  const LayerCost layer = layer_cost(job, fused);
  const double V = double(w.vocab), d = double(w.d);
  const double output_flops = 6 * V * d;       // bf16: torchtitan's float8 conversion skips `output`
  // The loss per logit: ctitan's fused cross-entropy reads the logits twice and writes dlogits;
  // torchtitan's eager fp32 one moves about 40 bytes (the cast, log_softmax, nll, their backward).
  const double loss_bytes = hw.is_gpu ? 40 * V : 3 * (job.bf16 ? 2 : 4) * V;
  out.executed_flops_per_token = double(w.layers) * (layer.bf16_flops + layer.fp8_flops) + output_flops;

  const double flops_rate = hw.peak_flops * hw.achievable_fraction;
  const double fp8_rate = flops_rate * hw.float8_speedup;
  // Seconds one GPU spends per token on one layer / on the output layer and loss (TP splits
  // matmuls and element-wise work alike).
  const double layer_matmul_s = (layer.bf16_flops / flops_rate + layer.fp8_flops / fp8_rate) / t;
  const double layer_elementwise_s = layer.hbm_bytes / hw.memory_bytes_per_s / t;
  const double head_matmul_s = output_flops / flops_rate / t;
  const double head_elementwise_s = loss_bytes / hw.memory_bytes_per_s / t;

  // The slowest pipeline rank sets the pace.
  const auto layers = stage_layers(w.layers, g.pp * v);
  double worst_layers = 0;
  for (int64_t r = 0; r < g.pp; ++r) {
    double n = 0;
    for (int64_t s = 0; s < v; ++s) n += double(layers[size_t(r + s * g.pp)]);
    worst_layers = std::max(worst_layers, n);
  }
  out.matmul_seconds = step_tokens * (worst_layers * layer_matmul_s + head_matmul_s);
  out.elementwise_seconds = step_tokens * (worst_layers * layer_elementwise_s + head_elementwise_s);
  const double compute = out.matmul_seconds + out.elementwise_seconds;

  // FSDP (or DDP): parameters all-gathered in forward and again in backward (once per step
  // under PP, which does not reshard), gradients reduce-scattered in the reduce dtype. They run
  // beside compute; what cannot hide is the first gather and the last reduction, and any excess
  // of traffic over compute.
  const double lin = double(numel(block_weights(w), /*linear_only=*/true)) / t;
  const double blk_numel = lin + 2 * d + (w.qk_norm ? 2 * double(w.head_dim) : 0);
  const double blk_gathered = hw.is_gpu ? lin * (job.float8 ? 1 : 2) + 2 * (blk_numel - lin) : blk_numel * (job.bf16 ? 2 : 4);
  const double root_numel = (w.tied ? 1 : 2) * V * d / t + d;  // embeddings, output (unless tied), norm
  const double rank_numel = worst_layers * blk_numel + root_numel;
  const double reduce_bytes = job.reduce_bf16 ? 2 : 4;
  const double microbatches = double(job.grad_accum_steps);
  double fsdp_s = 0, edge_s = 0;
  if (g.dp_shard > 1) {
    const double share = (dp - 1) / dp;
    const double gathers = g.pp > 1 ? 1 : 2 * microbatches;
    const double gathered = worst_layers * blk_gathered + root_numel * (job.bf16 || hw.is_gpu ? 2 : 4);
    const bool sync_each = g.pp == 1 && job.gradient_sync == config::GradientSync::kEveryMicrobatch;
    const double reductions = sync_each ? microbatches : 1;
    const double bytes = share * (gathered * gathers + rank_numel * reduce_bytes * reductions);
    const double bw = collective_bandwidth(hw, g.dp_shard * g.tp);
    out.fsdp_bytes = bytes;
    fsdp_s = bytes / bw;
    edge_s = share * (blk_gathered + blk_numel * reduce_bytes) / bw;
  }
  if (g.dp_replicate > 1) {
    // DDP's (or HSDP's replica) all-reduce of fp32 gradients: 2 (R - 1) / R of them, once a step.
    const double grads = g.dp_shard > 1 ? rank_numel / dp : rank_numel;
    const double bytes = 2 * (R - 1) / R * grads * 4;
    const double bw = collective_bandwidth(hw, g.dp_replicate * g.dp_shard * g.tp);
    out.fsdp_bytes += bytes;
    fsdp_s += bytes / bw;
    edge_s += std::min(grads * 4, 25e6 * 4) * 2 * (R - 1) / R / bw;  // the last bucket, after backward
  }
  out.fsdp_exposed_seconds = std::max(0.0, fsdp_s - compute) + edge_s;

  // TP with sequence parallel: per block, all-gathers before the attention and the FFN and
  // reduce-scatters after them, each moving (t - 1) / t of a (tokens, dim) tensor; backward
  // swaps them; recomputation repeats forward's (only the all-gathers under selective AC, whose
  // reduce-scatter outputs are saved). Float8 gathers its inputs in float8.
  if (g.tp > 1) {
    const double unit = (t - 1) / t * d;  // elements per token per collective
    const double ag = job.float8 ? 1 : 2;
    double per_layer = unit * (2 * ag + 2 * 2) + unit * 4 * 2;
    if (job.ac == ActivationCheckpoint::kFull) per_layer += unit * (2 * ag + 2 * 2);
    if (job.ac == ActivationCheckpoint::kSelectiveOp) per_layer += unit * 2 * ag;
    const double bytes = step_tokens * (worst_layers * per_layer + 2 * unit * 2 * 2);  // + embedding, output
    out.tp_bytes = bytes;
    const double tp_s = bytes / collective_bandwidth(hw, g.tp);
    // Async TP overlaps each collective with the matmul beside it.
    out.tp_exposed_seconds = job.async_tp ? std::max(0.0, tp_s - out.matmul_seconds) : tp_s;
  }

  // PP: each microbatch's activations go to the next stage and their gradients come back, a
  // (tokens, dim / t) bf16 tensor each way per stage boundary; the bubble is the schedule's fill
  // and drain: (p - 1) of (v m + p - 1) slots, v the stages per rank.
  if (g.pp > 1) {
    const double bytes = 2 * double(m * v) * mb_tokens * d / t * 2;
    out.pp_bytes = bytes;
    out.pp_p2p_seconds = bytes / collective_bandwidth(hw, g.world());
    out.bubble_seconds = (compute + out.pp_p2p_seconds) * (p - 1) / double(v * m);
  }
  out.step_seconds = compute + out.fsdp_exposed_seconds + out.tp_exposed_seconds + out.pp_p2p_seconds + out.bubble_seconds;
  out.tokens_per_second_per_gpu = step_tokens / out.step_seconds / (t * p);
  out.mfu_pct = 100 * out.flops_per_token * out.tokens_per_second_per_gpu / hw.peak_flops;
  return out;
}

JobEstimate estimate_job(const JobShape& job, const HardwareProfile& hw) {
  validate_job(job, hw);
  JobEstimate e;
  e.memory = estimate_memory(job, hw);
  e.throughput = estimate_throughput(job, hw);
  e.capacity_bytes = hw.memory_bytes;
  e.fits = e.memory.peak_bytes <= e.capacity_bytes;
  return e;
}

}  // namespace ctitan::estimate
