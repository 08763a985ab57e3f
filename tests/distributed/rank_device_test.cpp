#include "ctitan/distributed/rank_device.h"

#include <gtest/gtest.h>

#include "ctitan/common/error.h"
#include "ctitan/config/config_manager.h"
#include <torch/cuda.h>
#include "support/test_support.h"

namespace ctitan::distributed {
namespace {

using config::DeviceChoice;

// torchrun's convention: local rank k of a node uses cuda:k, whatever its global rank.
TEST(RankDevice, EachLocalRankGetsItsOwnGpu) {
  for (int local_rank = 0; local_rank < 8; ++local_rank) {
    EXPECT_EQ(device_for_rank(DeviceChoice::kAuto, local_rank, 8), c10::Device(c10::kCUDA, c10::DeviceIndex(local_rank)));
    EXPECT_EQ(device_for_rank(DeviceChoice::kCuda, local_rank, 8), c10::Device(c10::kCUDA, c10::DeviceIndex(local_rank)));
  }
}

TEST(RankDevice, CpuIsChosenWhenAskedOrWhenNoGpuIsVisible) {
  EXPECT_EQ(device_for_rank(DeviceChoice::kCpu, 3, 8), c10::Device(c10::kCPU));  // forced, GPUs or not
  EXPECT_EQ(device_for_rank(DeviceChoice::kAuto, 0, 0), c10::Device(c10::kCPU));
  EXPECT_EQ(device_for_rank(DeviceChoice::kAuto, 5, 0), c10::Device(c10::kCPU));
}

// More local ranks than GPUs would put two NCCL ranks on one GPU ("Duplicate GPU detected" at the
// first collective): refused at start-up instead, naming the rank and the count.
TEST(RankDevice, ALocalRankWithoutAGpuOfItsOwnIsRefused) {
  for (auto choice : {DeviceChoice::kAuto, DeviceChoice::kCuda}) {
    try {
      device_for_rank(choice, 2, 2);
      FAIL() << "LOCAL_RANK 2 with 2 GPUs was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("LOCAL_RANK 2 has no GPU of its own (2 visible)"), std::string::npos)
          << e.what();
    }
  }
}

// Slurm's --gpus-per-task=1 (or a per-rank CUDA_VISIBLE_DEVICES) shows each process only its own
// GPU: local rank 5 then uses cuda:0, the one it sees. Without that mask, one visible GPU is
// shared, and local rank 1 is refused as above.
TEST(RankDevice, AProcessGivenItsOwnGpuUsesTheOneItSees) {
  EXPECT_EQ(device_for_rank(DeviceChoice::kAuto, 5, 1, /*own_gpu_given=*/true), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(device_for_rank(DeviceChoice::kCuda, 0, 1, /*own_gpu_given=*/true), c10::Device(c10::kCUDA, 0));
  EXPECT_THROW(device_for_rank(DeviceChoice::kAuto, 1, 1, /*own_gpu_given=*/false), ConfigError);
  // A mask naming several GPUs is not "one each": local ranks index into it.
  EXPECT_EQ(device_for_rank(DeviceChoice::kAuto, 1, 2, /*own_gpu_given=*/false), c10::Device(c10::kCUDA, 1));
}

TEST(RankDevice, CudaWithoutAGpuIsRefused) {
  try {
    device_for_rank(DeviceChoice::kCuda, 0, 0);
    FAIL() << "training.device = cuda without a GPU was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("training.device = cuda, but no CUDA device is visible"), std::string::npos)
        << e.what();
  }
}

// This process (the suite runs with CTITAN_CUDA=0, and the build machine has no GPU) sees none:
// auto and cpu give the CPU, and the process records it for process-group creation.
TEST(RankDevice, TheProcessRecordsItsChoice) {
  if (torch::cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: this test needs a CPU-only process";
  EXPECT_EQ(use_rank_device(DeviceChoice::kAuto, 0), c10::Device(c10::kCPU));
  EXPECT_EQ(process_device(), c10::Device(c10::kCPU));
  EXPECT_THROW(use_rank_device(DeviceChoice::kCuda, 0), ConfigError);
  EXPECT_EQ(process_device(), c10::Device(c10::kCPU));
}

TEST(RankDevice, TheConfigKeyTakesItsThreeValuesAndRefusesOthers) {
  ctitan::testing::TempDir dir;
  auto path = (dir.path() / "job.toml").string();
  ctitan::testing::write_file(path, "[training]\ndevice = \"cpu\"\n");
  EXPECT_EQ(config::load_job_config(path, {}).training.device, DeviceChoice::kCpu);
  EXPECT_EQ(config::load_job_config(path, {"--training.device", "cuda"}).training.device, DeviceChoice::kCuda);
  EXPECT_EQ(config::load_job_config(path, {"--training.device", "auto"}).training.device, DeviceChoice::kAuto);
  try {
    config::load_job_config(path, {"--training.device", "gpu"});
    FAIL() << "training.device = gpu was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("training.device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctitan::distributed
