#include "ctitan/metrics/metrics_processor.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "ctitan/distributed/communicator.h"
#include "ctitan/cuda/cuda_module.h"
#include "ctitan/metrics/memory_tracker.h"

namespace ctitan::metrics {

MetricsProcessor::MetricsProcessor(MetricsSetup setup) : setup_(std::move(setup)), logger_(setup_.jsonl_path, setup_.tensorboard_dir) {}

namespace {

// Worst over ranks in one MAX all-reduce: the step time and the shares where higher is worse go
// as they are, those where lower is worse (compute, bandwidth use) negated. A NaN (not measured)
// goes as the lowest value, so that it never wins.
constexpr double kNotMeasured = -1e300;
double encode(double v, bool lower_is_worse) { return std::isnan(v) ? kNotMeasured : lower_is_worse ? -v : v; }
double decode(double v, bool lower_is_worse) { return v == kNotMeasured ? NAN : lower_is_worse ? -v : v; }

}  // namespace

Monitoring MetricsProcessor::window_monitoring(double seconds, int64_t peak_bytes, double* bandwidth_gbps) const {
  Monitoring m;
  if (setup_.memory_capacity_bytes > 0) m.memory_pct = 100.0 * double(peak_bytes) / double(setup_.memory_capacity_bytes);
  m.exposed_comm_pct = 100.0 * window_.comm_seconds / seconds;
  m.compute_pct = std::max(0.0, 100.0 - m.exposed_comm_pct - 100.0 * window_.data_seconds / seconds);
  *bandwidth_gbps = NAN;
  if (setup_.comm_seconds && setup_.comm_bytes) {
    const double blocked = setup_.comm_seconds() - window_.collective_seconds_at_start;
    const double bytes = double(setup_.comm_bytes() - window_.comm_bytes_at_start);
    if (blocked > 0) *bandwidth_gbps = bytes / blocked / 1e9;
    if (blocked > 0 && setup_.link_bytes_per_s > 0) m.bandwidth_use_pct = 100.0 * bytes / blocked / setup_.link_bytes_per_s;
    m.grad_sync_pct = 100.0 * window_.grad_sync_seconds / seconds;
  }
  return m;
}

void MetricsProcessor::start_window() {
  window_ = Window{};
  window_.collective_seconds_at_start = setup_.comm_seconds ? setup_.comm_seconds() : 0;
  window_.allocs_at_start = memory_stats().alloc_count;
  window_.page_faults_at_start = minor_page_faults();
  window_.comm_bytes_at_start = setup_.comm_bytes ? setup_.comm_bytes() : 0;
  reset_peak_memory();
  if (setup_.cuda_device >= 0) cuda::reset_device_peak_memory(setup_.cuda_device);
}

void MetricsProcessor::record_step(int64_t tokens, double data_seconds) {
  window_.steps += 1;
  window_.tokens += tokens;
  window_.data_seconds += data_seconds;
}

void MetricsProcessor::log(int64_t step, const torch::Tensor& loss, const torch::Tensor& rank_loss,
                           const torch::Tensor& grad_norm, double lr, const ModelState& state) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_.start).count();
  const double steps = double(std::max<int64_t>(window_.steps, 1));
  auto memory = memory_stats();
  cuda::DeviceMemoryStats device_memory;
  if (setup_.cuda_device >= 0) {
    // A GPU rank's memory is its device's: what the caching allocator handed to tensors.
    device_memory = cuda::device_memory_stats(setup_.cuda_device);
    memory.active_bytes = device_memory.allocated_bytes;
    memory.peak_bytes = device_memory.peak_allocated_bytes;
  }
  double bandwidth_gbps = NAN;
  const Monitoring mine = window_monitoring(seconds, memory.peak_bytes, &bandwidth_gbps);
  auto global_loss = loss.detach().clone();
  const double bubble = window_.pipeline_run_seconds > 0
                            ? 1.0 - window_.pipeline_busy_seconds / window_.pipeline_run_seconds
                            : NAN;
  // [step time, memory, compute, exposed comm, bandwidth use, grad sync, loss, pipeline bubble],
  // worst over the world, in the one MAX all-reduce a log step already makes.
  constexpr int kWorst = 8;
  const bool lower_is_worse[kWorst] = {false, false, true, false, true, false, false, false};
  const double values[kWorst] = {seconds / steps,       mine.memory_pct,        mine.compute_pct,
                                 mine.exposed_comm_pct, mine.bandwidth_use_pct, mine.grad_sync_pct,
                                 rank_loss.item<double>(), bubble};
  int64_t state_bytes[3] = {0, 0, 0};  // parameters, gradients, optimizer state
  for (const auto& p : state.params) {
    state_bytes[0] += int64_t(p.nbytes());
    if (p.grad().defined()) state_bytes[1] += int64_t(p.grad().nbytes());
  }
  for (const auto& [key, t] : state.optimizer_state) state_bytes[2] += int64_t(t.nbytes());
  // Under PP, two more slots per pp rank ride the same all-reduce: its peak bytes and model state
  // bytes, this rank's in its own slots and "not measured" in the others'.
  const bool pipeline = !std::isnan(setup_.pp_bubble_theory);
  const int pp_slots = pipeline ? 2 * setup_.pp_size : 0;
  auto worst = torch::full({kWorst + pp_slots}, kNotMeasured, torch::kDouble);
  for (int i = 0; i < kWorst; ++i) worst[i] = encode(values[i], lower_is_worse[i]);
  if (pipeline) {
    worst[kWorst + 2 * setup_.pp_rank] = double(memory.peak_bytes);
    worst[kWorst + 2 * setup_.pp_rank + 1] = double(state_bytes[0] + state_bytes[1] + state_bytes[2]);
  }
  if (setup_.dp_group) setup_.dp_group->all_reduce(global_loss, distributed::ReduceOp::kSum);
  if (setup_.world) setup_.world->all_reduce(worst, distributed::ReduceOp::kMax);
  double w[kWorst];
  for (int i = 0; i < kWorst; ++i) w[i] = decode(worst[i].item<double>(), lower_is_worse[i]);

  StepMetrics m;
  m.step = step;
  m.loss = global_loss.item<double>();
  m.max_loss = w[6];
  m.grad_norm = grad_norm.item<double>();  // global under DDP and FSDP: the same on every rank
  m.lr = lr;
  m.time_step_s = seconds / steps;
  m.time_step_max_s = w[0];
  m.monitoring = mine;
  m.worst = Monitoring{w[1], w[2], w[3], w[4], w[5]};
  m.comm_bandwidth_gbps = bandwidth_gbps;
  if (!std::isnan(setup_.pp_bubble_theory)) {
    m.pp_bubble = bubble;
    m.pp_bubble_max = w[7];
    m.pp_bubble_theory = setup_.pp_bubble_theory;
    for (int r = 0; r < setup_.pp_size; ++r) {
      m.pp_memory_peak_bytes.push_back(decode(worst[kWorst + 2 * r].item<double>(), false));
      m.pp_model_state_bytes.push_back(decode(worst[kWorst + 2 * r + 1].item<double>(), false));
    }
  }
  m.time_data_s = window_.data_seconds / steps;
  m.tps = double(window_.tokens) / seconds;
  m.tflops = setup_.flops_per_token * m.tps / 1e12;
  m.mfu = 100.0 * m.tflops * 1e12 / setup_.peak_flops;
  m.comm_exposed_s = window_.comm_seconds / steps;
  const int64_t bytes_now = setup_.comm_bytes ? setup_.comm_bytes() : 0;
  m.comm_bytes_per_step = double(bytes_now - window_.comm_bytes_at_start) / steps;
  m.memory_active_bytes = memory.active_bytes;
  m.memory_peak_bytes = memory.peak_bytes;
  m.memory_peak_fsdp_params_bytes = memory.peak_tagged_bytes[size_t(MemoryTag::kUnshardedParams)];
  m.memory_peak_fsdp_grads_bytes = memory.peak_tagged_bytes[size_t(MemoryTag::kUnshardedGrads)];
  m.memory_peak_fsdp_comm_bytes = memory.peak_tagged_bytes[size_t(MemoryTag::kCommBuffers)];
  m.memory_rss_bytes = resident_set_bytes();
  if (setup_.cuda_device >= 0) {
    m.device_memory = true;
    m.memory_reserved_bytes = device_memory.reserved_bytes;
    m.memory_peak_reserved_bytes = device_memory.peak_reserved_bytes;
    m.memory_alloc_retries = device_memory.alloc_retries;
    m.memory_ooms = device_memory.ooms;
  }
  m.memory_alloc_count = memory.alloc_count - window_.allocs_at_start;
  m.memory_page_faults_per_step = double(minor_page_faults() - window_.page_faults_at_start) / steps;
  m.memory_params_bytes = state_bytes[0];
  m.memory_grads_bytes = state_bytes[1];
  m.memory_optimizer_bytes = state_bytes[2];
  if (setup_.extra_fields) m.extra = setup_.extra_fields(window_.steps);
  logger_.log(m);
  if (!std::isfinite(m.loss)) spdlog::warn("step {}: loss is {}", step, m.loss);

  if (totals_.last_step == 0) totals_.first_step = step - window_.steps + 1;
  totals_.last_step = step;
  for (int i = 0; i < 5; ++i) {
    if (std::isnan(w[i + 1])) continue;
    totals_.weighted[i] += w[i + 1] * double(window_.steps);
    totals_.weight[i] += window_.steps;
  }
  start_window();
}

void MetricsProcessor::log_summary() {
  if (totals_.last_step == 0) return;  // nothing was logged
  double mean[5];
  for (int i = 0; i < 5; ++i) mean[i] = totals_.weight[i] ? totals_.weighted[i] / double(totals_.weight[i]) : NAN;
  logger_.log_summary(totals_.first_step, totals_.last_step,
                      check_targets(Monitoring{mean[0], mean[1], mean[2], mean[3], mean[4]}));
}

}  // namespace ctitan::metrics
