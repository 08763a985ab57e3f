#include "ctitan/metrics/metrics_processor.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "ctitan/distributed/communicator.h"
#include "ctitan/metrics/memory_tracker.h"

namespace ctitan::metrics {

MetricsProcessor::MetricsProcessor(MetricsSetup setup) : setup_(std::move(setup)), logger_(setup_.jsonl_path, setup_.tensorboard_dir) {}

void MetricsProcessor::start_window() {
  window_ = Window{};
  window_.allocs_at_start = memory_stats().alloc_count;
  window_.page_faults_at_start = minor_page_faults();
  window_.comm_bytes_at_start = setup_.comm_bytes ? setup_.comm_bytes() : 0;
  reset_peak_memory();
}

void MetricsProcessor::record_step(int64_t tokens, double data_seconds) {
  window_.steps += 1;
  window_.tokens += tokens;
  window_.data_seconds += data_seconds;
}

void MetricsProcessor::log(int64_t step, const torch::Tensor& loss, const torch::Tensor& grad_norm, double lr,
                           const ModelState& state) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_.start).count();
  const double steps = double(std::max<int64_t>(window_.steps, 1));
  auto global_loss = loss.detach().clone();
  auto step_time = torch::tensor(seconds / steps, torch::kDouble);
  if (setup_.dp_group) setup_.dp_group->all_reduce(global_loss, distributed::ReduceOp::kSum);
  if (setup_.world) setup_.world->all_reduce(step_time, distributed::ReduceOp::kMax);

  StepMetrics m;
  m.step = step;
  m.loss = global_loss.item<double>();
  m.grad_norm = grad_norm.item<double>();  // global under DDP and FSDP: the same on every rank
  m.lr = lr;
  m.time_step_s = seconds / steps;
  m.time_step_max_s = step_time.item<double>();
  m.time_data_s = window_.data_seconds / steps;
  m.tps = double(window_.tokens) / seconds;
  m.tflops = setup_.flops_per_token * m.tps / 1e12;
  m.mfu = 100.0 * m.tflops * 1e12 / setup_.peak_flops;
  m.comm_exposed_s = window_.comm_seconds / steps;
  const int64_t bytes_now = setup_.comm_bytes ? setup_.comm_bytes() : 0;
  m.comm_bytes_per_step = double(bytes_now - window_.comm_bytes_at_start) / steps;
  const auto memory = memory_stats();
  m.memory_active_bytes = memory.active_bytes;
  m.memory_peak_bytes = memory.peak_bytes;
  m.memory_rss_bytes = resident_set_bytes();
  m.memory_alloc_count = memory.alloc_count - window_.allocs_at_start;
  m.memory_page_faults_per_step = double(minor_page_faults() - window_.page_faults_at_start) / steps;
  for (const auto& p : state.params) {
    m.memory_params_bytes += int64_t(p.nbytes());
    if (p.grad().defined()) m.memory_grads_bytes += int64_t(p.grad().nbytes());
  }
  for (const auto& [key, t] : state.optimizer_state) m.memory_optimizer_bytes += int64_t(t.nbytes());
  logger_.log(m);
  if (!std::isfinite(m.loss)) spdlog::warn("step {}: loss is {}", step, m.loss);
  start_window();
}

}  // namespace ctitan::metrics
