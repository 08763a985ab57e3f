#pragma once
// What the trainer logs and how it is computed, as torchtitan's MetricsProcessor: throughput
// (tokens/s, TFLOP/s, MFU), memory, the compute/communication split, and the global loss.
// Between log steps it accumulates plain numbers only; at a log step it reads the step's loss and
// grad norm once and runs the only metric collectives (loss sum over dp, step-time max over the
// world). A step never waits on the host for a number it only logs.
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/metrics/metrics_logger.h"
#include "ctitan/metrics/monitoring.h"

namespace ctitan::distributed {
class Communicator;
}

namespace ctitan::metrics {

struct MetricsSetup {
  double flops_per_token = 0;  // the model's training FLOPs per token (torchtitan's formula)
  double peak_flops = 0;       // the FLOP/s MFU divides by
  // dp: the loss is summed over it; world: the step time is maxed over it. Null where a caller has
  // no groups (the ps server); the trainer's world of one has groups of one rank.
  std::shared_ptr<distributed::Communicator> dp_group, world;
  std::function<int64_t()> comm_bytes;  // payload bytes of the mesh's collectives so far
  std::function<double()> comm_seconds;  // seconds blocked in the mesh's collectives so far
  int64_t memory_capacity_bytes = 0;     // this rank's share of the device's memory
  // The rank's GPU, or -1 on the CPU: on a GPU, memory is the CUDA caching allocator's (tensors
  // there never pass through the CPU counting allocator).
  int cuda_device = -1;
  double link_bytes_per_s = 0;           // the link's bandwidth for bandwidth use; 0: unknown
  std::string jsonl_path;               // empty: no metrics.jsonl on this rank
  std::string tensorboard_dir;          // empty: no TensorBoard events from this rank
  double pp_bubble_theory = NAN;        // pipeline parallelism: the schedule's idle share in theory
  int pp_rank = 0, pp_size = 1;         // pipeline parallelism: this rank's stage group, and how many
  // More fields for each metrics.jsonl row, read once per log step with the window's step count
  // (ctitan ps: its RPC latency and bytes). Unset: none.
  std::function<std::vector<std::pair<std::string, double>>(int64_t window_steps)> extra_fields;
};

// The tensors whose storage makes up this rank's model state at a log step.
struct ModelState {
  std::vector<torch::Tensor> params;  // what the optimizer steps on (FSDP: the shards)
  StateDict optimizer_state;
};

class MetricsProcessor {
 public:
  explicit MetricsProcessor(MetricsSetup setup);

  // Starts a logging window: throughput, memory peaks and counters are measured from here.
  void start_window();
  // After every step: tokens this rank processed and seconds it waited for data.
  void record_step(int64_t tokens, double data_seconds);
  // Seconds the training thread was blocked in collectives (not hidden by compute).
  void add_comm_seconds(double seconds) { window_.comm_seconds += seconds; }
  // Seconds from the end of backward compute until the gradients were ready (DataParallel).
  void add_grad_sync_seconds(double seconds) { window_.grad_sync_seconds += seconds; }
  // Pipeline parallelism: seconds of forward/backward compute within `run` seconds of schedule runs.
  void add_pipeline_seconds(double busy, double run) {
    window_.pipeline_busy_seconds += busy;
    window_.pipeline_run_seconds += run;
  }

  // At a log step: `loss` is this rank's share of the global mean (its dp-group sum is the mean),
  // `rank_loss` the mean over this rank's own tokens (maxed over ranks: global_max_loss),
  // `grad_norm` the global norm. Writes the console line and a metrics.jsonl row, then starts the
  // next window.
  void log(int64_t step, const torch::Tensor& loss, const torch::Tensor& rank_loss, const torch::Tensor& grad_norm,
           double lr,
           const ModelState& state);
  void log_validation(int64_t step, double loss, int64_t tokens) { logger_.log_validation(step, loss, tokens); }
  void flush() { logger_.flush(); }
  void sync() { logger_.sync(); }  // flush and fsync: what was logged is on disk
  // The end-of-run monitoring table over every logged window (worst rank, step-weighted).
  void log_summary();

 private:
  struct Window {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    int64_t steps = 0, tokens = 0, allocs_at_start = 0, page_faults_at_start = 0, comm_bytes_at_start = 0;
    double data_seconds = 0;
    double comm_seconds = 0;  // exposed: added by the trainer
    double grad_sync_seconds = 0;
    double pipeline_busy_seconds = 0, pipeline_run_seconds = 0;
    double collective_seconds_at_start = 0;  // the mesh's blocked seconds, for bandwidth
  };
  // Step-weighted sums of the worst rank's shares over the logged windows, for log_summary().
  struct RunTotals {
    int64_t first_step = 0, last_step = 0;
    double weighted[5] = {0, 0, 0, 0, 0};
    int64_t weight[5] = {0, 0, 0, 0, 0};
  };
  // This rank's shares of the window ending now, and the comm bandwidth (GB/s).
  Monitoring window_monitoring(double seconds, int64_t peak_bytes, double* bandwidth_gbps) const;

  MetricsSetup setup_;
  MetricsLogger logger_;
  Window window_;
  RunTotals totals_;
};

}  // namespace ctitan::metrics
