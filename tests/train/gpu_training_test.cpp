// Training on CUDA against the same job on the CPU (tests/support/gpu.h: skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>

#include "ctitan/train/trainer.h"
#include "support/gpu.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::train {
namespace {

using ctitan::testing::TempDir;

config::JobConfig job_on(const std::string& folder, config::DeviceChoice device) {
  auto config = ctitan::testing::tiny_job_config(folder);
  config.training.device = device;
  return config;
}

// The loader's next batch, on the trainer's device (as Trainer::train() moves it).
data::Batch next_batch(Trainer& trainer) {
  auto batch = trainer.dataloader().next();
  return {batch.inputs.to(trainer.device()), batch.labels.to(trainer.device())};
}

std::vector<double> losses_of(Trainer& trainer, int steps) {
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(trainer.train_step({next_batch(trainer)}).loss.item<double>());
  return losses;
}

TEST(GpuTraining, TheTrainerUsesTheRanksGpu) {
  CTITAN_SKIP_WITHOUT_CUDA();
  TempDir dir;
  Trainer trainer(job_on(dir.path(), config::DeviceChoice::kAuto));
  for (const auto& p : trainer.model().parameters()) EXPECT_EQ(p.device(), torch::Device(torch::kCUDA, 0));
}

// The same fp32 job, same seed and data, on CUDA and on the CPU for 20 steps. The initial weights
// are equal (made on the CPU's RNG either way); the kernels differ in summation order (cuBLAS vs
// oneDNN GEMMs, TF32 off), about 1e-6 relative per op. AdamW normalises updates, so early
// differences do not shrink; over 20 steps on this tiny model they stay well inside 2e-3 on a loss
// of order 1, while a wrong mask, RoPE or optimizer step moves the loss by 1e-2 or more.
TEST(GpuTraining, Fp32TwentyStepsOnCudaEqualTheCpu) {
  CTITAN_SKIP_WITHOUT_CUDA();
  TempDir cpu_dir, gpu_dir;
  Trainer cpu(job_on(cpu_dir.path(), config::DeviceChoice::kCpu));
  Trainer gpu(job_on(gpu_dir.path(), config::DeviceChoice::kCuda));
  auto expected = losses_of(cpu, 20), got = losses_of(gpu, 20);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 2e-3) << "step " << i + 1;
  EXPECT_LT(got.back(), got.front() - 0.5);  // and it learned
}

// bf16 autocast on CUDA: the loss of the learnable cyclic task falls from ln(32) = 3.47 to under
// 1.0 (tests/train/trainer_test.cpp's Bf16Trains bound), with fp32 master weights.
TEST(GpuTraining, Bf16LossFalls) {
  CTITAN_SKIP_WITHOUT_CUDA();
  TempDir dir;
  auto config = job_on(dir.path(), config::DeviceChoice::kCuda);
  config.training.mixed_precision_param = torch::kBFloat16;
  Trainer trainer(config);
  trainer.train();
  EXPECT_LT(trainer.forward_backward({next_batch(trainer)}).first.item<double>(), 1.0);
  for (const auto& p : trainer.model().parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
}

// Full activation checkpointing recomputes each block's forward with the same kernels on the same
// inputs, so the forward is the same; backward kernels on CUDA may accumulate with atomics (the
// embedding's gradient over repeated tokens, SDPA's memory-efficient backward) in another order,
// ~1e-7 relative, which 5 AdamW steps keep within 1e-5 on the loss. A recomputation that saw other
// weights or dropped a block's autocast state is off by 1e-3 or more.
TEST(GpuTraining, ActivationCheckpointingEqualsNone) {
  CTITAN_SKIP_WITHOUT_CUDA();
  TempDir plain_dir, ac_dir;
  auto plain_config = job_on(plain_dir.path(), config::DeviceChoice::kCuda);
  auto ac_config = plain_config;
  ac_config.job.dump_folder = ac_dir.path();
  ac_config.activation_checkpoint.mode = config::ActivationCheckpointMode::kFull;
  Trainer plain(plain_config), checkpointed(ac_config);
  auto expected = losses_of(plain, 5), got = losses_of(checkpointed, 5);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << "step " << i + 1;
}

// Every stateful part saved from a CUDA run loads into a CPU run, which continues as the CUDA run
// does, within the CUDA-vs-CPU tolerance argued above (3 steps from equal states).
TEST(GpuTraining, StateSavedOnCudaResumesOnTheCpu) {
  CTITAN_SKIP_WITHOUT_CUDA();
  TempDir gpu_dir, cpu_dir;
  auto gpu_config = job_on(gpu_dir.path(), config::DeviceChoice::kCuda);
  gpu_config.training.steps = 10;
  Trainer gpu(gpu_config);
  gpu.train();
  std::map<std::string, StateDict> saved;
  for (const auto& [part, dict] : gpu.state_dicts()) {
    for (const auto& [k, v] : dict) saved[part][k] = v.is_cuda() ? v.cpu() : v.clone();
  }
  auto cpu_config = job_on(cpu_dir.path(), config::DeviceChoice::kCpu);
  cpu_config.training.steps = 10;
  cpu_config.debug.seed = 999;  // other weights: the load must overwrite them
  Trainer cpu(cpu_config);
  cpu.load_state_dicts(saved);
  EXPECT_EQ(cpu.step(), 10);
  auto expected = losses_of(gpu, 3), got = losses_of(cpu, 3);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 2e-3) << "step " << 11 + i;
}

}  // namespace
}  // namespace ctitan::train

namespace ctitan::train {
namespace {

// Seed lesson 001 on CUDA: 300 steps with log_freq 100, and metrics.jsonl's memory is the device's
// (the caching allocator's allocated bytes), flat from one log window to the next: nothing per-step
// is kept. Bounds: the peak holds at least the model state (fp32 parameters, gradients and AdamW's
// two moments: 16 bytes a parameter) and at most what the allocator reserved; once warm, the live
// bytes at a log step are the same at step 200 and 300 (model state plus the optimizer's steady
// buffers; a leak of one per-step scalar would add 512 bytes, one allocator block, per step).
TEST(GpuTraining, MemoryMetricsAreTheDevicesAndStayFlat) {
  CTITAN_SKIP_WITHOUT_CUDA();
  TempDir dir;
  auto config = job_on(dir.path(), config::DeviceChoice::kCuda);
  config.training.steps = 300;
  config.metrics.log_freq = 100;
  int64_t n_params = 0;
  {
    Trainer trainer(config);
    for (const auto& p : trainer.model().parameters()) n_params += p.numel();
    trainer.train();
  }
  auto rows = ctitan::testing::read_jsonl((dir.path() / "metrics.jsonl").string());
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) {
    ASSERT_TRUE(row.contains("memory_peak_reserved_bytes")) << row.dump();
    EXPECT_GE(row["memory_peak_bytes"].get<int64_t>(), 16 * n_params) << row.dump();
    EXPECT_LE(row["memory_peak_bytes"].get<int64_t>(), row["memory_peak_reserved_bytes"].get<int64_t>()) << row.dump();
    EXPECT_EQ(row["memory_ooms"].get<int64_t>(), 0);
  }
  EXPECT_EQ(rows[1]["memory_active_bytes"].get<int64_t>(), rows[2]["memory_active_bytes"].get<int64_t>());
  EXPECT_EQ(rows[1]["memory_peak_bytes"].get<int64_t>(), rows[2]["memory_peak_bytes"].get<int64_t>());
}

}  // namespace
}  // namespace ctitan::train

namespace ctitan::train {
namespace {

// A checkpoint saved by a run on one device resumes a run on the other, synchronous or async
// (staged in pinned host memory), and the resumed run continues as the saving run does, within the
// CUDA-vs-CPU tolerance argued above.
TEST(GpuTraining, CheckpointsMoveBetweenCudaAndTheCpu) {
  CTITAN_SKIP_WITHOUT_CUDA();
  for (auto mode : {config::AsyncMode::kDisabled, config::AsyncMode::kAsync}) {
    for (auto [from, to] : {std::pair{config::DeviceChoice::kCuda, config::DeviceChoice::kCpu},
                            std::pair{config::DeviceChoice::kCpu, config::DeviceChoice::kCuda}}) {
      SCOPED_TRACE(std::string(mode == config::AsyncMode::kAsync ? "async" : "sync") +
                   (from == config::DeviceChoice::kCuda ? ", cuda -> cpu" : ", cpu -> cuda"));
      TempDir dir;
      auto config = job_on(dir.path(), from);
      config.training.steps = 10;
      config.checkpoint.enable = true;
      config.checkpoint.interval = 5;
      config.checkpoint.async_mode = mode;
      config.checkpoint.last_save_model_only = false;
      std::vector<double> expected;
      {
        Trainer saving(config);
        saving.train();  // saves steps 5 and 10 (and waits for an async save)
        expected = losses_of(saving, 3);
      }
      auto resumed_config = config;
      resumed_config.training.device = to;
      resumed_config.training.steps = 13;
      Trainer resumed(resumed_config);
      ASSERT_EQ(resumed.step(), 10);
      auto got = losses_of(resumed, 3);
      for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 2e-3) << "step " << 11 + i;
    }
  }
}

}  // namespace
}  // namespace ctitan::train
