#pragma once
// Writes logged steps to the console (torchtitan's line), to metrics.jsonl and to TensorBoard
// (torchtitan's tag names). Takes plain
// numbers only: the trainer converts tensors to doubles at log steps, so nothing here can keep
// a step's tensors (and their autograd graph) alive.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/metrics/monitoring.h"
#include "ctitan/metrics/tensorboard_writer.h"

namespace ctitan::metrics {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double max_loss = 0;   // the largest per-rank mean loss (torchtitan's global_max_loss)
  double grad_norm = 0;
  double lr = 0;
  double tps = 0;        // tokens/s on this rank over the steps since the last log
  double tflops = 0;     // achieved model TFLOP/s (torchtitan's FLOPs formula)
  double mfu = 0;        // percent of the peak FLOP/s
  int64_t memory_active_bytes = 0;
  int64_t memory_peak_bytes = 0;
  // What FSDP held at the moment of memory_peak_bytes (MemoryTag): gathered parameters, their
  // gradients before the reduction's copy, communication buffers. The rest of the peak is model
  // state, activations and op temporaries. 0 without FSDP.
  int64_t memory_peak_fsdp_params_bytes = 0, memory_peak_fsdp_grads_bytes = 0, memory_peak_fsdp_comm_bytes = 0;
  int64_t memory_rss_bytes = 0;
  // On a GPU (device_memory): memory_active_bytes and memory_peak_bytes are the CUDA caching
  // allocator's allocated bytes now and at their peak since the last log
  // (torch.cuda.max_memory_allocated); these are what it reserved from the device, and how often
  // a cudaMalloc failed and was retried after freeing its cache, or ran out of memory.
  bool device_memory = false;
  int64_t memory_reserved_bytes = 0, memory_peak_reserved_bytes = 0;
  int64_t memory_alloc_retries = 0, memory_ooms = 0;
  int64_t memory_alloc_count = 0;  // allocations since the last log
  double memory_page_faults_per_step = 0;  // minor page faults per step since the last log
  double time_step_s = 0;  // mean wall time of one step since the last log
  double time_data_s = 0;  // mean part of it spent waiting for data
  double time_step_max_s = 0;  // the slowest rank's mean step time: stragglers show here
  double comm_exposed_s = 0;   // mean time per step blocked in collectives (not hidden by compute)
  double comm_bytes_per_step = 0;  // payload bytes of this rank's data-parallel collectives per step
  // Model state on this rank at the log step, from the tensors' storage: parameters the
  // optimizer steps on (shards under FSDP), their gradients, and the optimizer's state.
  int64_t memory_params_bytes = 0;
  int64_t memory_grads_bytes = 0;
  int64_t memory_optimizer_bytes = 0;
  // The monitoring table's shares (monitoring.h): this rank's, and the worst over all ranks.
  Monitoring monitoring, worst;
  double comm_bandwidth_gbps = NAN;  // collective payload GB per second blocked in collectives
  // Pipeline parallelism: this rank's idle share of its schedule runs (1 - compute / run time),
  // the largest over the ranks, and the schedule's theoretical (p-1)/(m+p-1); NaN without PP.
  double pp_bubble = NAN, pp_bubble_max = NAN, pp_bubble_theory = NAN;
  // Pipeline parallelism, per pp rank (its stages), the largest over that rank's dp and tp peers:
  // the window's peak live bytes, and the model state (parameters, gradients, optimizer state)
  // at the log step. Their difference is what the schedule's in-flight activations cost.
  std::vector<double> pp_memory_peak_bytes, pp_model_state_bytes;
  // More numbers for the metrics.jsonl row, by field name (ctitan ps: RPC latency and bytes).
  std::vector<std::pair<std::string, double>> extra;
};

// Makes `path` ready for a run that starts after step `resumed_step` (0: a fresh run). A fresh run
// starts an empty file. A resumed run keeps the rows of the steps it resumes after and drops the
// later ones, which it trains and logs again (a crash between a checkpoint and the next one leaves
// such rows behind); an unparsable row, such as a line torn by the crash, is dropped too. The file
// is rewritten through a temporary and a rename, so a failure here loses nothing.
void prepare_metrics_file(const std::string& path, int64_t resumed_step);

class MetricsLogger {
 public:
  // An empty `jsonl_path` or `tensorboard_dir` disables that output.
  MetricsLogger(const std::string& jsonl_path, const std::string& tensorboard_dir);
  void log(const StepMetrics& m);
  void log_validation(int64_t step, double loss, int64_t tokens);
  // The end-of-run monitoring table: to the console, and to monitoring_summary.json beside
  // metrics.jsonl.
  void log_summary(int64_t first_step, int64_t last_step, const std::vector<TargetCheck>& checks);
  void flush();
  // flush(), then fsync the files: the rows and points written so far are on disk when it returns.
  void sync();

 private:
  // Throws IoError naming metrics.jsonl if a write to it failed.
  void check_jsonl();
  std::string jsonl_path_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace ctitan::metrics
