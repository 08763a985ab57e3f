// `ctitan estimate` (estimate/job_estimate.h) against hand arithmetic, against ctitan's own
// measured peak memory (runs of the binary on this CPU), and against torchtitan's published H100
// runs. No test asserts a time or throughput measured on this machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/estimate/job_estimate.h"
#include "ctitan/models/common/flops.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/train/model_builder.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::estimate {
namespace {

using models::model_flavor;
using testing::concat;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

JobShape cpu_job(const std::string& flavor, int64_t batch, int64_t seq, bool bf16, int64_t dp_shard = 1) {
  JobShape job;
  job.model = model_flavor("llama3", flavor);
  job.local_batch_size = batch;
  job.seq_len = seq;
  job.bf16 = bf16;
  job.degrees.dp_shard = dp_shard;
  return job;
}

HardwareProfile cpu_profile() {
  auto hw = hardware_profile("cpu");
  hw.peak_flops = 1e11;  // fixed: no GEMM probe in tests
  return hw;
}

// ---------------------------------------------------------------------------------------------
// Arithmetic on hand-checkable cases
// ---------------------------------------------------------------------------------------------

// fp32 master weights, fp32 gradients and AdamW's two fp32 moments: 16 bytes per parameter,
// divided by the FSDP shards (the debug model's dims are all even: no padding over 2 shards).
TEST(JobEstimate, ModelStateIsSixteenBytesPerParameterOverShards) {
  const int64_t P = models::count_params(model_flavor("llama3", "debugmodel")).total;
  for (int64_t shards : {1, 2}) {
    auto m = estimate_memory(cpu_job("debugmodel", 1, 16, true, shards), cpu_profile());
    EXPECT_EQ(m.state_params_bytes, 4 * P / shards);
    EXPECT_EQ(m.state_grads_bytes, 4 * P / shards);
    EXPECT_EQ(m.state_optimizer_bytes, 8 * P / shards);
  }
  // GPU, FSDP 8: the same 16 bytes per parameter over 8 shards (rounded per part).
  JobShape job;
  job.model = model_flavor("llama3", "8B");
  job.local_batch_size = 1;
  job.seq_len = 8192;
  job.degrees.dp_shard = 8;
  const int64_t P8 = models::count_params(job.model).total;
  auto m = estimate_memory(job, hardware_profile("h100"));
  EXPECT_NEAR(double(m.state_params_bytes + m.state_grads_bytes + m.state_optimizer_bytes), 16.0 * double(P8) / 8, 4);
  // TP 8 shards every matmul weight and the vocabulary, not the norms' weights.
  job.degrees.tp = 8;
  const auto& a = job.model;
  const double norms = double(a.dim * (2 * a.n_layers + 1));
  m = estimate_memory(job, hardware_profile("h100"));
  EXPECT_NEAR(double(m.state_params_bytes), 4 * ((double(P8) - norms) / 8 + norms) / 8, 1);
}

// Qwen3's model state, by the model's own parameter count (models::count_params, which counts
// the QK-norms and no head weight when tied): CPU and GPU walks, one process and FSDP 8.
TEST(JobEstimate, Qwen3ModelStateCountsQkNormsAndATiedHeadOnce) {
  for (const char* flavor : {"0.6B" /* tied */, "8B"}) {
    JobShape job;
    job.model = model_flavor("qwen3", flavor);
    job.local_batch_size = 1;
    job.seq_len = 16;
    job.bf16 = true;
    const int64_t P = models::count_params(job.model).total;
    auto m = estimate_memory(job, cpu_profile());
    EXPECT_EQ(m.state_params_bytes, 4 * P) << flavor;
    EXPECT_EQ(m.state_optimizer_bytes, 8 * P) << flavor;
    job.degrees.dp_shard = 8;
    job.seq_len = 4096;
    m = estimate_memory(job, hardware_profile("h100"));
    // Rounded per part on the GPU walk; padded per parameter rows on the CPU one.
    EXPECT_NEAR(double(m.state_params_bytes + m.state_grads_bytes + m.state_optimizer_bytes), 16.0 * double(P) / 8,
                16.0 * double(P) / 8 * 1e-6) << flavor;
  }
}

// The debug model in one process under bf16 autocast, batch 4 x 256: the peak is the output
// layer's backward, when the cross-entropy has written dlogits over the logits, the output
// matmul has allocated its input and weight gradients, and every saved activation still lives.
// Every term below is one tensor (or one kind of tensor) of ctitan's step.
TEST(JobEstimate, DebugModelPeakAddsUpByHand) {
  const int64_t N = 4 * 256, d = 256, f = 768, H = 16, V = 2048, L = 6;
  const int64_t P = models::count_params(model_flavor("llama3", "debugmodel")).total;  // 6,163,712
  const int64_t linear = L * (4 * d * d + 3 * d * f) + V * d;  // the matmul weights autocast casts
  const int64_t state = 4 * P + 8 * P;                         // fp32 weights + AdamW (no grads yet)
  const int64_t rope = 2 * 2048 * (16 / 2) * 4;                // cos, sin: (max_seq_len, head_dim / 2) fp32
  const int64_t batch = 2 * N * 8;                             // inputs, labels int64
  // Per token per block: x and h (fp32 residual, 4 d each), two rstd (4 each), the two norm
  // outputs, q, k, v, the attention output (bf16, 2 d each), logsumexp (4 H), w1, w3, SiLU's and
  // the product's outputs (bf16 SwiGLU runs as tensor ops, 2 f each).
  const int64_t per_token_block = 2 * 4 * d + 2 * 4 + 6 * 2 * d + 4 * H + 4 * 2 * f;
  EXPECT_EQ(per_token_block, 11336);
  const int64_t head = N * (4 * d + 4 + 2 * d);  // the final norm's input, rstd, output
  const int64_t dlogits = N * V * 2;             // in the logits' own buffer; logsumexp already freed
  const int64_t output_grads = N * d * 2 + V * d * 2;  // the output matmul's input and weight gradients (bf16)
  const int64_t expected = state + rope + batch + L * N * per_token_block + 2 * linear + head + dlogits + output_grads;
  auto m = estimate_memory(cpu_job("debugmodel", 4, 256, true), cpu_profile());
  EXPECT_EQ(m.peak_bytes, expected);
  EXPECT_EQ(m.peak_at, "backward: output");
  EXPECT_EQ(m.params_bytes + m.grads_bytes + m.optimizer_bytes + m.activations_bytes + m.comm_buffers_bytes +
                m.other_bytes,
            m.peak_bytes);
}

// torchtitan's FLOPs per token is what MFU counts; the executed count adds recomputation and
// counts attention as the causal kernel computes it (half of 12 * hd * T).
// Llama 3 8B, seq 8192, FSDP over 8 GPUs: the shape of torchtitan's published 8B run.
JobShape eight_b_fsdp8(int64_t local_batch_size) {
  JobShape job;
  job.model = model_flavor("llama3", "8B");
  job.seq_len = 8192;
  job.local_batch_size = local_batch_size;
  job.degrees.dp_shard = 8;
  return job;
}

// Per-token sizes of a model, named as in the FLOP formulas below.
struct Sizes {
  double d, hd, kv, f, L, V, lin;  // lin: the block's matmul weights per token (q, k, v, o, w1..3)
};
Sizes sizes_of(const models::ModelArgs& a) {
  const double d = double(a.dim), hd = double(a.n_heads * a.head_dim()), kv = double(a.kv_heads() * a.head_dim());
  const double f = double(a.ffn_hidden_dim());
  return {d, hd, kv, f, double(a.n_layers), double(a.vocab_size), 2 * d * hd + 2 * d * kv + 3 * d * f};
}

TEST(JobEstimate, FlopsPerTokenAndRecomputation) {
  JobShape job = eight_b_fsdp8(1);
  const auto [d, hd, kv, f, L, V, lin] = sizes_of(job.model);
  const double T = 8192;
  const auto hw = hardware_profile("h100");
  const double none = L * (6 * lin + 6 * hd * T) + 6 * V * d;
  auto t = estimate_throughput(job, hw);
  EXPECT_DOUBLE_EQ(t.flops_per_token, models::flops_per_token(job.model, 8192));
  EXPECT_NEAR(t.executed_flops_per_token, none, 1e-9 * none);
  job.ac = ActivationCheckpoint::kFull;  // the blocks' forward again
  EXPECT_NEAR(estimate_throughput(job, hw).executed_flops_per_token, none + L * (2 * lin + 2 * hd * T), 1e-9 * none);
  job.ac = ActivationCheckpoint::kSelectiveOp;  // the 2nd, 4th, 6th matmuls again: wk, wo, w3
  EXPECT_NEAR(estimate_throughput(job, hw).executed_flops_per_token, none + L * 2 * (d * kv + hd * d + f * d),
              1e-9 * none);
}

// Float8 runs the blocks' matmuls at twice the rate; attention and the output layer stay bf16.
TEST(JobEstimate, Float8DoublesTheBlockMatmulRate) {
  JobShape job = eight_b_fsdp8(2);
  job.compile = true;
  const auto [d, hd, kv, f, L, V, lin] = sizes_of(job.model);
  const double T = 8192;
  const auto hw = hardware_profile("h100");
  const double rate = hw.peak_flops * hw.achievable_fraction, tokens = 2 * 8192;
  auto bf16 = estimate_throughput(job, hw);
  EXPECT_NEAR(bf16.matmul_seconds, tokens * (L * (6 * lin + 6 * hd * T) + 6 * V * d) / rate, 1e-9);
  job.float8 = true;
  auto fp8 = estimate_throughput(job, hw);
  EXPECT_NEAR(fp8.matmul_seconds, tokens * (L * (6 * lin / 2 + 6 * hd * T) + 6 * V * d) / rate, 1e-9);
  EXPECT_GT(fp8.elementwise_seconds, bf16.elementwise_seconds);  // float8 casts read and write activations
}

// The pipeline bubble: (p - 1) of (v m + p - 1) slots, so (p - 1) / (v m) of the busy time.
TEST(JobEstimate, PipelineBubble) {
  JobShape job;
  job.model = model_flavor("llama3", "405B");
  job.seq_len = 8192;
  job.local_batch_size = 32;
  job.degrees = {1, 8, 8, 8};
  job.ac = ActivationCheckpoint::kFull;
  const auto hw = hardware_profile("h100");
  auto busy = [](const ThroughputEstimate& t) { return t.matmul_seconds + t.elementwise_seconds + t.pp_p2p_seconds; };
  auto one = estimate_throughput(job, hw);  // 1F1B, 8 microbatches (torchtitan's default: one per stage)
  EXPECT_NEAR(one.bubble_seconds / busy(one), 7.0 / 8.0, 1e-12);
  job.pp_schedule = PipelineSchedule::kInterleaved1F1B;  // two stages per rank
  auto two = estimate_throughput(job, hw);
  EXPECT_NEAR(two.bubble_seconds / busy(two), 7.0 / 16.0, 1e-12);
  job.pp_microbatches = 32;
  auto many = estimate_throughput(job, hw);
  EXPECT_NEAR(many.bubble_seconds / busy(many), 7.0 / 64.0, 1e-12);
}

void expect_estimate_input_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST(JobEstimate, RejectsBadInputNamingTheFlag) {
  JobShape job;
  job.model = model_flavor("llama3", "8B");
  job.seq_len = 8192;
  const auto gpu = hardware_profile("h100");
  job.degrees.tp = 3;
  expect_estimate_input_error([&] { validate_job(job, gpu); }, "--tp 3");
  job.degrees.tp = 16;  // divides the 32 query heads, not the 8 kv heads
  expect_estimate_input_error([&] { validate_job(job, gpu); }, "model.n_kv_heads");
  job.degrees.tp = 2;
  expect_estimate_input_error([&] { validate_job(job, cpu_profile()); }, "--tp and --pp");
  job.degrees.tp = 1;
  job.degrees.pp = 4;
  job.local_batch_size = 4;
  job.pp_microbatches = 2;
  expect_estimate_input_error([&] { validate_job(job, gpu); }, "--pp-microbatches 2");
  expect_estimate_input_error([] { hardware_profile("a100"); }, "--hardware 'a100'");
  // A tied head under PP: the trainer refuses it, so the estimate does too.
  JobShape tied;
  tied.model = model_flavor("qwen3", "0.6B");
  tied.degrees.pp = 2;
  expect_estimate_input_error([&] { validate_job(tied, gpu); }, "ties the output layer");
}

// ---------------------------------------------------------------------------------------------
// torchtitan's published H100 runs
// ---------------------------------------------------------------------------------------------
//
// torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torch 1963fc8, torchtitan 9dec370):
// 96 GB HBM2e H100s at 500 W, 8 per host on NVLink, 400 Gb/s RDMA per GPU; seq 8192; bf16 FSDP
// mixed precision; microbatches under PP = stages (the default then). Memory there is the caching
// allocator's peak *reserved* bytes; ours are live bytes.
//
// Tolerances, and why:
// - 8B FSDP eager tokens/s: 1%. In sample: the profile's achievable fraction was fitted on it.
// - the other bf16 runs (torch.compile; 128 GPUs): 5%. Same kernels and model; only the
//   element-wise traffic (compile) or the FSDP traffic (128 GPUs) changes, and both are modelled.
// - float8 runs: 20%, 30% with async TP. The model takes float8 at the datasheet's 2x and async
//   TP as hiding all TP traffic: the two largest assumptions, both optimistic (the 8B float8 runs
//   measure how optimistic: about +15%).
// - memory: from -35% to +5%. Live bytes cannot exceed reserved ones (5% for our own
//   approximations); reserved exceeds live by fragmentation and by blocks cached in one phase of
//   the step that another cannot reuse, which we do not model (10-30% in these runs).
struct PublishedRun {
  const char* name;
  const char* flavor;
  int64_t local_batch, dp_shard, tp, pp;
  ActivationCheckpoint ac;
  bool compile, float8, async_tp;
  PipelineSchedule schedule;
  double tps, memory_gib;
  double tps_tolerance_pct;
};

TEST(JobEstimate, TorchtitanPublishedH100Runs) {
  using A = ActivationCheckpoint;
  using S = PipelineSchedule;
  const std::vector<PublishedRun> runs = {
      {"8B FSDP8, SAC (calibration)", "8B", 2, 8, 1, 1, A::kSelectiveOp, false, false, false, S::k1F1B, 5762, 82.4, 1},
      {"8B FSDP8, SAC, compile", "8B", 2, 8, 1, 1, A::kSelectiveOp, true, false, false, S::k1F1B, 6667, 77.0, 5},
      {"8B FSDP8, SAC, compile, float8", "8B", 2, 8, 1, 1, A::kSelectiveOp, true, true, false, S::k1F1B, 8532, 76.8, 20},
      {"8B FSDP128, SAC", "8B", 2, 128, 1, 1, A::kSelectiveOp, false, false, false, S::k1F1B, 5605, 67.0, 5},
      {"8B FSDP128, SAC, compile", "8B", 2, 128, 1, 1, A::kSelectiveOp, true, false, false, S::k1F1B, 6514, 62.0, 5},
      {"70B FSDP32 x TP8, full, compile, float8", "70B", 16, 32, 8, 1, A::kFull, true, true, false, S::k1F1B, 829, 71.9,
       20},
      {"70B ... + async TP", "70B", 16, 32, 8, 1, A::kFull, true, true, true, S::k1F1B, 876, 67.6, 30},
      {"405B FSDP8 x TP8 x PP8, 1F1B", "405B", 32, 8, 8, 8, A::kFull, true, true, true, S::k1F1B, 100, 82.5, 20},
      {"405B ..., Interleaved 1F1B", "405B", 32, 8, 8, 8, A::kFull, true, true, true, S::kInterleaved1F1B, 128, 72.7,
       20},
  };
  const auto hw = hardware_profile("h100-96gb");
  std::printf("%-42s %9s %9s %8s %9s %9s %8s\n", "torchtitan run (H100)", "tok/s/GPU", "published", "error", "GiB",
              "published", "error");
  for (const auto& r : runs) {
    JobShape job;
    job.model = model_flavor("llama3", r.flavor);
    job.local_batch_size = r.local_batch;
    job.seq_len = 8192;
    job.degrees = {1, r.dp_shard, r.tp, r.pp};
    job.ac = r.ac;
    job.compile = r.compile;
    job.float8 = r.float8;
    job.async_tp = r.async_tp;
    job.pp_schedule = r.schedule;
    const auto e = estimate_job(job, hw);
    const double tps = e.throughput.tokens_per_second_per_gpu, gib = double(e.memory.peak_bytes) / kGiB;
    const double tps_err = 100 * (tps / r.tps - 1), mem_err = 100 * (gib / r.memory_gib - 1);
    std::printf("%-42s %9.0f %9.0f %+7.1f%% %9.1f %9.1f %+7.1f%%\n", r.name, tps, r.tps, tps_err, gib, r.memory_gib,
                mem_err);
    EXPECT_LE(std::abs(tps_err), r.tps_tolerance_pct) << r.name;
    EXPECT_LE(mem_err, 5.0) << r.name;
    EXPECT_GE(mem_err, -35.0) << r.name;
  }
  // MFU as torchtitan reports it for the calibration run: the doc gives 33% to 39% without float8.
  JobShape job = eight_b_fsdp8(2);
  job.ac = A::kSelectiveOp;
  EXPECT_NEAR(estimate_throughput(job, hw).mfu_pct, 33.7, 0.5);
}

// ---------------------------------------------------------------------------------------------
// ctitan's own measured memory (runs the binary)
// ---------------------------------------------------------------------------------------------

struct MeasuredCase {
  const char* name;
  const char* config;  // under configs/
  int nproc;
  std::vector<std::string> overrides;
  // The issue asks for 10%. The walk reproduces the allocator to tens of bytes in fp32
  // (docs/PERFORMANCE.md): 0.1% there catches a tensor of a few rows. bf16 runs measure up to
  // ~2 MB of unmodelled scratch here (the same bytes for every model of the same token count;
  // bf16 matmul kernels are the suspect), so 2% leaves room for that and for libtorch's version and
  // thread count while catching any forgotten block-sized tensor.
  double tolerance_pct = 2.0;
};

// The peak the counting allocator measured in step 2 (a steady step, which is what the estimate
// models: the optimizer's moments exist from its start), and the estimate of the same job.
void expect_estimates_match_measured_peaks(const std::vector<MeasuredCase>& cases) {
  testing::TempDir dir;
  const std::string tokens = dir.file("tokens.bin");
  testing::write_cyclic_token_file(tokens, 20000, 97, 2048);
  for (const auto& c : cases) {
    const std::string dump = dir.file("run" + std::to_string(&c - cases.data()));
    const std::vector<std::string> overrides =
        concat(c.overrides, {"--job.dump_folder", dump, "--training.steps", "2", "--metrics.log_freq", "1",
                             "--validation.enable", "false", "--metrics.peak_flops", "1e12", "--comm.link_gbytes_per_s",
                             "1", "--training.dataset", "tokens", "--training.dataset_path", tokens,
                             "--model.tokenizer_path="});
    const std::string config = std::string(CTITAN_SOURCE_DIR) + "/configs/" + c.config + ".toml";
    std::vector<std::string> head = {"train"};
    if (c.nproc > 1) head = {"run", "--nproc-per-node", std::to_string(c.nproc), "--master-port", "0", "train"};
    auto r = testing::run_ctitan(concat(concat(head, {"--config", config}), overrides), 600);
    ASSERT_EQ(r.exit_code, 0) << c.name << "\n" << r.output;
    double measured = 0;
    for (const auto& row : testing::read_jsonl(dump + "/metrics.jsonl")) {
      if (row.value("step", 0) == 2 && row.contains("memory_peak_bytes")) measured = row["memory_peak_bytes"].get<double>();
    }
    ASSERT_GT(measured, 0) << c.name << ": no step-2 row in metrics.jsonl";

    auto job_config = config::load_job_config(config, overrides);
    auto job = job_shape_from_config(job_config, train::model_args_from_config(job_config, nullptr), c.nproc);
    const auto m = estimate_memory(job, cpu_profile());
    const double error_pct = 100 * (double(m.peak_bytes) / measured - 1);
    std::printf("%-40s measured %12.0f  estimated %12lld  error %+.4f%%  (peak at %s)\n", c.name, measured,
                static_cast<long long>(m.peak_bytes), error_pct, m.peak_at.c_str());
    EXPECT_LE(std::abs(error_pct), c.tolerance_pct) << c.name;
  }
}

TEST(CliEstimate, MatchesMeasuredMemoryOnCpu) {
  expect_estimates_match_measured_peaks({
      {"debug, 1 process, bf16 autocast", "llama3_debug", 1, {"--training.local_batch_size", "2", "--training.seq_len", "128"}},
      {"debug, FSDP over 2 ranks, bf16 params", "llama3_debug", 2,
       {"--training.local_batch_size", "2", "--training.seq_len", "128"}},
      // fp32: bf16 matmuls are 5-20x slower on CPUs without bf16 instructions. The
      // estimate models both dtypes; this run's peak is the end of backward (all gradients).
      {"134M, 1 process, fp32", "llama3_134m", 1,
       {"--training.local_batch_size", "1", "--training.seq_len", "256", "--training.mixed_precision_param", "float32"},
       0.1},
  });
}

// Qwen3: the QK-norms (what they save, their backward) and a tied head (no weight of its own; the
// embedding's weight read at both ends, its group kept gathered under FSDP).
TEST(CliEstimate, MatchesMeasuredMemoryOfQwen3OnCpu) {
  const std::vector<std::string> small = {"--training.local_batch_size", "2", "--training.seq_len", "128"};
  const std::vector<std::string> tied = {"--model.flavor", "0.6B", "--model.dim", "256", "--model.n_layers", "6",
                                         "--model.n_heads", "4", "--model.n_kv_heads", "2", "--model.head_dim", "32",
                                         "--model.hidden_dim", "768", "--model.vocab_size", "2048"};
  // The smaller Qwen3 debug model leaves the bf16 one-process scratch above 2%: its bf16 path is
  // the Llama case's above; FSDP's bf16 and both fp32 paths are checked here. Without the QK-norms
  // and the tied head modelled, the fp32 rows were off by -1.3% and +5.6%.
  const std::vector<std::string> fp32 = {"--training.mixed_precision_param", "float32"};
  expect_estimates_match_measured_peaks({
      {"qwen3 debug, FSDP over 2 ranks, bf16", "qwen3_debug", 2, small},
      {"qwen3 debug, 1 process, fp32", "qwen3_debug", 1, concat(small, fp32), 0.1},
      {"qwen3 tied, FSDP over 2 ranks, bf16", "qwen3_debug", 2, concat(small, tied)},
      {"qwen3 tied, 1 process, fp32", "qwen3_debug", 1, concat(concat(small, tied), fp32), 0.1},
  });
}

// The command itself: --json agrees with the in-process estimate; bad input is one line naming
// the flag, exit code 2.
TEST(CliEstimate, JsonAndOneLineErrors) {
  const std::string config = std::string(CTITAN_SOURCE_DIR) + "/configs/llama3_8b.toml";
  const std::vector<std::string> args = {"estimate", "--config", config, "--hardware", "h100-96gb", "--dp-shard", "8",
                                         "--local-batch-size", "2", "--ac", "selective"};
  auto r = testing::run_ctitan(concat(args, {"--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto json = nlohmann::json::parse(r.output);
  JobShape job = eight_b_fsdp8(2);
  job.ac = ActivationCheckpoint::kSelectiveOp;
  const auto e = estimate_job(job, hardware_profile("h100-96gb"));
  EXPECT_EQ(json["memory"]["peak_bytes"].get<int64_t>(), e.memory.peak_bytes);
  EXPECT_DOUBLE_EQ(json["throughput"]["tokens_per_second_per_gpu"].get<double>(), e.throughput.tokens_per_second_per_gpu);
  EXPECT_TRUE(json["memory"]["fits"].get<bool>());

  auto table = testing::run_ctitan(args);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  for (auto word : {"parameters", "gradients", "optimizer state", "activations", "communication buffers",
                    "FLOPs per token", "step time", "tokens/s/GPU", "MFU", "fits"}) {
    EXPECT_NE(table.output.find(word), std::string::npos) << word << "\n" << table.output;
  }

  struct Bad {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Bad> bad = {
      {{"estimate", "--hardware", "h100"}, "--config"},
      {{"estimate", "--config", "/nonexistent/job.toml"}, "/nonexistent/job.toml"},
      {{"estimate", "--config", config, "--hardware", "a100"}, "--hardware 'a100'"},
      {{"estimate", "--config", config, "--hardware", "h100", "--tp", "3"}, "--tp 3"},
      {{"estimate", "--config", config, "--hardware", "h100", "--ac", "sometimes"}, "--ac 'sometimes'"},
      {{"estimate", "--config", config, "--hardware", "h100", "--training.batchsize", "2"}, "training.batchsize"},
  };
  for (const auto& b : bad) {
    auto e = testing::run_ctitan(b.args);
    EXPECT_EQ(e.exit_code, 2) << e.output;
    auto end = e.output.find_last_not_of('\n');
    auto line = e.output.substr(e.output.rfind('\n', end) == std::string::npos ? 0 : e.output.rfind('\n', end) + 1);
    EXPECT_EQ(line.rfind("ctitan: ", 0), 0u) << e.output;
    EXPECT_NE(line.find(b.needle), std::string::npos) << "last line: " << line;
  }
}

}  // namespace
}  // namespace ctitan::estimate
