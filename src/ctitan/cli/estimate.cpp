// `ctitan estimate --config FILE [--section.key value ...] [--dp-shard N --tp N --pp N --ac MODE
// --hardware NAME ...]`: a job's per-rank memory, FLOPs per token, step time, tokens/s/GPU and MFU,
// computed from the config alone (estimate/job_estimate.h). Nothing is allocated or run, except
// the GEMM probe for a CPU's peak FLOP/s (cached, as `ctitan train` does for MFU).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <optional>

#include "ctitan/cli/commands.h"
#include "ctitan/common/byte_units.h"
#include "ctitan/common/error.h"
#include "ctitan/common/threads.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/estimate/job_estimate.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/metrics/peak_flops.h"
#include "ctitan/models/common/flops.h"
#include "ctitan/train/model_builder.h"

namespace ctitan::cli {
namespace {

struct EstimateFlags {
  std::string config_path;
  std::optional<int64_t> dp_replicate, dp_shard, tp, local_batch_size, seq_len, world_size;
  int64_t pp = 1;
  std::string pp_schedule = "1F1B";
  int64_t pp_microbatches = 0;
  std::string ac = "none";
  bool compile = false, float8 = false, async_tp = false, json = false;
  std::string hardware = "cpu";
  std::optional<double> memory_gib, peak_tflops, memory_bandwidth_gbps, intra_node_gbps, inter_node_gbps,
      achievable_fraction;
  std::optional<int64_t> gpus_per_node;
};

estimate::ActivationCheckpoint parse_ac(const std::string& s) {
  if (s == "none") return estimate::ActivationCheckpoint::kNone;
  if (s == "selective" || s == "op") return estimate::ActivationCheckpoint::kSelectiveOp;
  if (s == "full") return estimate::ActivationCheckpoint::kFull;
  throw InputError(fmt::format("--ac '{}' is unknown (none, selective, full)", s), 2);
}

estimate::PipelineSchedule parse_schedule(const std::string& s) {
  if (s == "1F1B") return estimate::PipelineSchedule::k1F1B;
  if (s == "Interleaved1F1B") return estimate::PipelineSchedule::kInterleaved1F1B;
  throw InputError(fmt::format("--pp-schedule '{}' is unknown (1F1B, Interleaved1F1B)", s), 2);
}

const char* ac_name(estimate::ActivationCheckpoint ac) {
  switch (ac) {
    case estimate::ActivationCheckpoint::kNone: return "none";
    case estimate::ActivationCheckpoint::kSelectiveOp: return "selective (op)";
    case estimate::ActivationCheckpoint::kFull: return "full";
  }
  return "?";
}

// The built-in profile with any flag given replacing its field. A CPU's peak is the GEMM probe
// in the compute dtype (cached), or metrics.peak_flops; its memory is the machine's share per rank.
estimate::HardwareProfile resolve_hardware(const EstimateFlags& f, const config::JobConfig& config, int64_t world) {
  auto hw = estimate::hardware_profile(f.hardware);
  auto positive = [](const char* flag, double v) {
    if (!(v > 0)) throw InputError(fmt::format("{} must be > 0 (got {})", flag, v), 2);
    return v;
  };
  if (!hw.is_gpu) {
    hw.memory_bytes = metrics::physical_memory_bytes() / std::max<int64_t>(world, 1);
    if (config.comm.link_gbytes_per_s > 0) hw.intra_node_bytes_per_s = config.comm.link_gbytes_per_s * 1e9;
  }
  if (f.memory_gib) hw.memory_bytes = int64_t(positive("--memory-gib", *f.memory_gib) * kGiB);
  if (f.peak_tflops) hw.peak_flops = positive("--peak-tflops", *f.peak_tflops) * 1e12;
  if (f.memory_bandwidth_gbps) hw.memory_bytes_per_s = positive("--memory-bandwidth-gbps", *f.memory_bandwidth_gbps) * 1e9;
  if (f.intra_node_gbps) hw.intra_node_bytes_per_s = positive("--intra-node-gbps", *f.intra_node_gbps) * 1e9;
  if (f.inter_node_gbps) hw.inter_node_bytes_per_s = positive("--inter-node-gbps", *f.inter_node_gbps) * 1e9;
  if (f.achievable_fraction) hw.achievable_fraction = positive("--achievable-fraction", *f.achievable_fraction);
  if (f.gpus_per_node) hw.devices_per_node = int64_t(positive("--gpus-per-node", double(*f.gpus_per_node)));
  if (!hw.is_gpu && hw.peak_flops <= 0) {
    configure_threads();
    const auto dtype = config.training.mixed_precision_param;
    hw.peak_flops = metrics::resolve_peak_flops(config.metrics.peak_flops, dtype).flops;
  }
  return hw;
}

nlohmann::json to_json(const estimate::JobShape& job, const estimate::HardwareProfile& hw, const estimate::JobEstimate& e) {
  const auto& m = e.memory;
  const auto& t = e.throughput;
  const auto params = models::count_params(job.model);
  return {
      {"model", {{"params", params.total}, {"non_embedding_params", params.total - params.embedding}}},
      {"layout",
       {{"dp_replicate", job.degrees.dp_replicate}, {"dp_shard", job.degrees.dp_shard}, {"tp", job.degrees.tp},
        {"pp", job.degrees.pp}, {"cp", job.cp}, {"world_size", job.degrees.world()}, {"local_batch_size", job.local_batch_size},
        {"seq_len", job.seq_len}, {"grad_accum_steps", job.grad_accum_steps}, {"ac", ac_name(job.ac)},
        {"compile", job.compile}, {"float8", job.float8}, {"async_tp", job.async_tp}, {"bf16", job.bf16}}},
      {"hardware",
       {{"name", hw.name}, {"memory_bytes", hw.memory_bytes}, {"peak_flops", hw.peak_flops},
        {"achievable_fraction", hw.achievable_fraction}, {"memory_bytes_per_s", hw.memory_bytes_per_s},
        {"intra_node_bytes_per_s", hw.intra_node_bytes_per_s}, {"inter_node_bytes_per_s", hw.inter_node_bytes_per_s},
        {"devices_per_node", hw.devices_per_node}}},
      {"memory",
       {{"params_bytes", m.params_bytes}, {"grads_bytes", m.grads_bytes}, {"optimizer_bytes", m.optimizer_bytes},
        {"activations_bytes", m.activations_bytes}, {"comm_buffers_bytes", m.comm_buffers_bytes},
        {"other_bytes", m.other_bytes}, {"peak_bytes", m.peak_bytes}, {"peak_at", m.peak_at},
        {"pipeline_rank", m.pipeline_rank}, {"capacity_bytes", e.capacity_bytes}, {"fits", e.fits},
        {"state_params_bytes", m.state_params_bytes}, {"state_grads_bytes", m.state_grads_bytes},
        {"state_optimizer_bytes", m.state_optimizer_bytes}}},
      {"throughput",
       {{"flops_per_token", t.flops_per_token}, {"executed_flops_per_token", t.executed_flops_per_token},
        {"matmul_seconds", t.matmul_seconds}, {"elementwise_seconds", t.elementwise_seconds},
        {"fsdp_exposed_seconds", t.fsdp_exposed_seconds}, {"tp_exposed_seconds", t.tp_exposed_seconds},
        {"pp_p2p_seconds", t.pp_p2p_seconds}, {"bubble_seconds", t.bubble_seconds}, {"step_seconds", t.step_seconds},
        {"tokens_per_second_per_gpu", t.tokens_per_second_per_gpu}, {"mfu_pct", t.mfu_pct},
        {"fsdp_bytes", t.fsdp_bytes}, {"tp_bytes", t.tp_bytes}, {"pp_bytes", t.pp_bytes}}},
  };
}

// GiB from 1 GiB up, MiB below: the debug model's whole step is about 150 MiB. `width` aligns
// the table's column.
std::string human(int64_t bytes, int width = 10) {
  if (double(bytes) >= kGiB) return fmt::format("{:{}.3f} GiB", double(bytes) / kGiB, width);
  return fmt::format("{:{}.3f} MiB", double(bytes) / (1024.0 * 1024.0), width);
}

void print_table(const config::JobConfig& config, const estimate::JobShape& job, const estimate::HardwareProfile& hw,
                 const estimate::JobEstimate& e) {
  const auto& m = e.memory;
  const auto& t = e.throughput;
  const auto params = models::count_params(job.model);
  const auto& g = job.degrees;
  const char* device = hw.is_gpu ? "GPU" : "rank";
  // Under PP the local batch is split into the schedule's microbatches; otherwise each
  // microbatch of gradient accumulation is a local batch.
  const int64_t microbatches = g.pp > 1 ? (job.pp_microbatches > 0 ? job.pp_microbatches : g.pp) : job.grad_accum_steps;
  fmt::print("model      {} {}: {:.3f}B params; local batch {} x seq {}{}, {} microbatch{} per step\n", config.model.name,
             config.model.flavor, double(params.total) / 1e9, job.local_batch_size, job.seq_len * job.cp,
             job.cp > 1 ? fmt::format(" ({} per rank: context parallel {}; dp_shard below counts dp_shard x cp)",
                                      job.seq_len, job.cp)
                        : "",
             microbatches, microbatches > 1 ? "es" : "");
  fmt::print("layout     dp_replicate {} x dp_shard {} x tp {} x pp {} = {} {}{}; {}; AC {}{}{}{}\n", g.dp_replicate,
             g.dp_shard, g.tp, g.pp, g.world(), device, g.world() > 1 ? "s" : "", job.bf16 ? "bf16" : "fp32", ac_name(job.ac),
             job.compile ? ", compile" : "", job.float8 ? ", float8" : "", job.async_tp ? ", async TP" : "");
  fmt::print("hardware   {}: {}\n\n", hw.name, hw.description);
  fmt::print("kept between steps per {}: parameters {}, gradients {}, optimizer state {} (fp32)\n\n", device,
             human(m.state_params_bytes, 0), human(m.state_grads_bytes, 0), human(m.state_optimizer_bytes, 0));
  fmt::print("memory per {} at its peak ({}{})\n", device, m.peak_at,
             g.pp > 1 ? fmt::format(", pipeline rank {}, the worst", m.pipeline_rank) : std::string());
  fmt::print("  parameters             {}\n", human(m.params_bytes));
  fmt::print("  gradients              {}\n", human(m.grads_bytes));
  fmt::print("  optimizer state        {}\n", human(m.optimizer_bytes));
  fmt::print("  activations            {}\n", human(m.activations_bytes));
  fmt::print("  communication buffers  {}\n", human(m.comm_buffers_bytes));
  fmt::print("  other                  {}\n", human(m.other_bytes));
  fmt::print("  peak                   {}  of {}: {} ({:.0f}%)\n\n", human(m.peak_bytes),
             human(e.capacity_bytes, 0), e.fits ? "fits" : "DOES NOT FIT",
             100.0 * double(m.peak_bytes) / double(e.capacity_bytes));
  fmt::print("compute\n");
  fmt::print("  FLOPs per token        {:.4g} (torchtitan's count; {:.4g} executed, with recomputation)\n",
             t.flops_per_token, t.executed_flops_per_token);
  fmt::print("  step time              {:.4g} s = matmuls {:.4g} + element-wise {:.4g} + exposed FSDP/DDP {:.4g}"
             " + TP {:.4g} + PP p2p {:.4g} + bubble {:.4g}\n",
             t.step_seconds, t.matmul_seconds, t.elementwise_seconds, t.fsdp_exposed_seconds, t.tp_exposed_seconds,
             t.pp_p2p_seconds, t.bubble_seconds);
  fmt::print("  tokens/s/{:<13} {:.1f}\n", device, t.tokens_per_second_per_gpu);
  fmt::print("  MFU                    {:.1f}% of {:.4g} TFLOP/s ({:.0f}% achievable assumed)\n", t.mfu_pct,
             hw.peak_flops / 1e12, 100 * hw.achievable_fraction);
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "estimate", "Estimate a job's per-rank memory, FLOPs per token, step time, tokens/s and MFU (nothing runs)");
  auto f = std::make_shared<EstimateFlags>();
  cmd->add_option("--config,--job.config_file", f->config_path, "TOML job config (required)")->check(config_file_check());
  cmd->add_option("--dp-replicate", f->dp_replicate, "parallelism.data_parallel_replicate_degree");
  cmd->add_option("--dp-shard", f->dp_shard, "parallelism.data_parallel_shard_degree (-1: the ranks left over)");
  cmd->add_option("--tp", f->tp, "parallelism.tensor_parallel_degree");
  cmd->add_option("--pp", f->pp, "pipeline stages (ranks)")->capture_default_str();
  cmd->add_option("--pp-schedule", f->pp_schedule, "1F1B or Interleaved1F1B (2 stages per rank)")->capture_default_str();
  cmd->add_option("--pp-microbatches", f->pp_microbatches, "microbatches per step under PP (0: one per stage)")
      ->capture_default_str();
  cmd->add_option("--local-batch-size", f->local_batch_size, "training.local_batch_size");
  cmd->add_option("--seq-len", f->seq_len, "training.seq_len");
  cmd->add_option("--world-size", f->world_size, "ranks in the job: resolves data_parallel_shard_degree = -1");
  cmd->add_option("--ac", f->ac, "activation checkpointing: none, selective (op) or full")->capture_default_str();
  cmd->add_flag("--compile", f->compile, "torch.compile'd blocks (torchtitan)");
  cmd->add_flag("--float8", f->float8, "float8 linears and all-gathers (torchtitan + torchao)");
  cmd->add_flag("--async-tp", f->async_tp, "TP collectives overlapped with matmuls (needs --compile)");
  cmd->add_option("--hardware", f->hardware,
                  "built-in profile: " + fmt::format("{}", fmt::join(estimate::hardware_profile_names(), ", ")))
      ->capture_default_str();
  cmd->add_option("--memory-gib", f->memory_gib, "memory per device, GiB");
  cmd->add_option("--peak-tflops", f->peak_tflops, "dense peak in the compute dtype (bf16 on GPUs), TFLOP/s");
  cmd->add_option("--achievable-fraction", f->achievable_fraction, "share of the peak a step's matmuls reach");
  cmd->add_option("--memory-bandwidth-gbps", f->memory_bandwidth_gbps, "device memory bandwidth, GB/s");
  cmd->add_option("--intra-node-gbps", f->intra_node_gbps, "per-device link within a node, one direction, GB/s");
  cmd->add_option("--inter-node-gbps", f->inter_node_gbps, "per-device link across nodes, one direction, GB/s");
  cmd->add_option("--gpus-per-node", f->gpus_per_node, "devices per node");
  cmd->add_flag("--json", f->json, "print one JSON object instead of the table");
  // Any other `--section.key value` words override the config, as for `ctitan train`.
  cmd->allow_extras();
  cmd->callback([cmd, f] {
    if (f->config_path.empty()) {
      throw InputError("--config: give the job's TOML (e.g. configs/llama3_8b.toml)", 2);
    }
    auto overrides = cmd->remaining();
    auto set = [&](const char* key, const std::optional<int64_t>& v) {
      if (v) overrides.insert(overrides.end(), {std::string("--") + key, std::to_string(*v)});
    };
    set("parallelism.data_parallel_replicate_degree", f->dp_replicate);
    set("parallelism.data_parallel_shard_degree", f->dp_shard);
    set("parallelism.tensor_parallel_degree", f->tp);
    set("training.local_batch_size", f->local_batch_size);
    set("training.seq_len", f->seq_len);
    auto config = config::load_job_config(f->config_path, overrides);
    if (f->pp < 1) throw InputError(fmt::format("--pp must be >= 1 (got {})", f->pp), 2);

    // The ranks of one pipeline stage: what data_parallel_shard_degree = -1 divides.
    const auto& p = config.parallelism;
    // In double first, so that no product of degrees overflows.
    constexpr double kMaxRanks = double(int64_t(1) << 24);
    const double ranks = double(p.data_parallel_replicate_degree) * double(std::max<int64_t>(p.data_parallel_shard_degree, 1)) *
                         double(p.tensor_parallel_degree) * double(f->pp);
    if (ranks > kMaxRanks || (f->world_size && double(*f->world_size) > kMaxRanks)) {
      throw InputError(fmt::format("the parallel degrees (--dp-replicate, --dp-shard, --tp, --pp, --world-size) make "
                                   "more than 2^24 ranks"), 2);
    }
    int64_t stage_world = p.data_parallel_replicate_degree * std::max<int64_t>(p.data_parallel_shard_degree, 1) *
                          p.tensor_parallel_degree;
    if (f->world_size) {
      if (*f->world_size < 1 || *f->world_size % f->pp != 0) {
        throw InputError(fmt::format("--world-size {} is not a positive multiple of --pp {}", *f->world_size, f->pp), 2);
      }
      stage_world = *f->world_size / f->pp;
    }
    auto job = estimate::job_shape_from_config(config, train::model_args_from_config(config, nullptr), stage_world);
    if (f->world_size && job.degrees.dp_replicate * job.degrees.dp_shard * job.degrees.tp != stage_world) {
      throw InputError(fmt::format("--world-size {}: dp_replicate {} x dp_shard {} x tp {} x pp {} = {}", *f->world_size,
                                   job.degrees.dp_replicate, job.degrees.dp_shard, job.degrees.tp, f->pp,
                                   job.degrees.dp_replicate * job.degrees.dp_shard * job.degrees.tp * f->pp),
                       2);
    }
    job.degrees.pp = f->pp;
    job.pp_schedule = parse_schedule(f->pp_schedule);
    job.pp_microbatches = f->pp_microbatches;
    job.ac = parse_ac(f->ac);
    job.compile = f->compile;
    job.float8 = f->float8;
    job.async_tp = f->async_tp;
    if (f->pp_microbatches < 0) throw InputError("--pp-microbatches must be >= 0", 2);

    const auto hw = resolve_hardware(*f, config, job.degrees.world());
    const auto estimate = estimate::estimate_job(job, hw);
    if (f->json) {
      std::cout << to_json(job, hw, estimate).dump(2) << std::endl;
    } else {
      print_table(config, job, hw, estimate);
    }
  });
}

}  // namespace ctitan::cli
