#pragma once
// Parity runs: the tiny job (tiny_job.h) as one process or under `ctitan run`, its metrics.jsonl
// rows, and the largest relative differences between two runs' losses and gradient norms.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ctitan::testing {

using Rows = std::vector<nlohmann::json>;

// The tiny job with `args`, as one process (nproc 1) or `ctitan run --nproc-per-node nproc`;
// expects exit 0. Single-process runs are deterministic, so each is run once per test binary.
Rows run_tiny_job(int nproc, const std::vector<std::string>& args);

// --parallelism degrees: data_parallel_replicate, data_parallel_shard, tensor_parallel.
std::vector<std::string> degrees(int replicate, int shard, int tp = 1);

struct Deviation {
  double loss = 0, grad_norm = 0;
};
// Largest relative differences of loss and grad norm, step by step; both runs log every step.
Deviation compare_runs(const Rows& reference, const Rows& run, size_t steps);

// Checks each logged loss of `run` against `reference`'s at the same step (parity.h's fp32 bound,
// 1e-4 relative) and returns how many steps were compared: a resumed run's metrics.jsonl (the
// first run's steps, then the resumed ones) against the uninterrupted one-process run.
int expect_losses_match_by_step(const Rows& run, const Rows& reference);

// The validation losses of a run's rows, in step order.
std::vector<double> validation_losses(const Rows& rows);

// 30 steps, every step logged.
extern const std::vector<std::string> kThirtySteps;

// fp32. A sharded run differs from one process only in summation order: each rank's gradient is
// a sum over its own samples, then the collectives add the ranks' sums, ~1e-7 relative per step,
// which AdamW carries forward. Measured: at most a few 1e-7 for DDP/FSDP, ~3e-6 for TP (row-wise
// partial products, the vocab-parallel log-sum-exp). The bounds, 1e-4 on the loss and 1e-3 on the
// grad norm, leave orders of margin for other thread counts, yet a
// shard reduced twice, a missing padding mask or a loss divided by N twice moves these by tens
// of percent. Also checks that the run learned (last loss < half the first).
void expect_parity(const std::string& what, int nproc, const std::vector<std::string>& layout_args,
                   const std::vector<std::string>& single_args = {"--training.local_batch_size", "4"});

// The tiny job trained `common` (steps and a step-4 checkpoint included) as one process and as
// `nproc` ranks with `layout_args`, both step-4 checkpoints exported to HF, and the exports read
// back by the safetensors library (the venv's Python, an independent reader): the tensor count
// and the largest relative difference. Expects every command to succeed.
struct ExportComparison {
  int tensors = 0;
  double worst = 1;
};
ExportComparison compare_hf_exports(int nproc, const std::vector<std::string>& layout_args,
                                    const std::vector<std::string>& common);

}  // namespace ctitan::testing
