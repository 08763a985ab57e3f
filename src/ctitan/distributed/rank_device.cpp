#include "ctitan/distributed/rank_device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "ctitan/common/error.h"

namespace ctitan::distributed {
namespace {

// Written once by use_rank_device(), read by process-group creation (possibly on other threads).
std::atomic<int> chosen_cuda_index{-1};  // -1: the CPU

}  // namespace

c10::Device device_for_rank(config::DeviceChoice choice, int local_rank, int cuda_devices, bool own_gpu_given) {
  if (choice == config::DeviceChoice::kCpu) return c10::Device(c10::kCPU);
  if (cuda_devices <= 0) {
    if (choice == config::DeviceChoice::kAuto) return c10::Device(c10::kCPU);
    throw ConfigError("training.device = cuda, but no CUDA device is visible (no NVIDIA driver, "
                      "CUDA_VISIBLE_DEVICES empty, or CTITAN_CUDA=0); use training.device = cpu");
  }
  if (cuda_devices == 1 && own_gpu_given) return c10::Device(c10::kCUDA, 0);
  if (local_rank < 0 || local_rank >= cuda_devices) {
    throw ConfigError(fmt::format(
        "training.device = {}: LOCAL_RANK {} has no GPU of its own ({} visible); start at most {} processes per "
        "node, or set training.device = cpu",
        choice == config::DeviceChoice::kAuto ? "auto" : "cuda", local_rank, cuda_devices, cuda_devices));
  }
  return c10::Device(c10::kCUDA, c10::DeviceIndex(local_rank));
}

c10::Device use_rank_device(config::DeviceChoice choice, int local_rank) {
  // device_count() is 0 when libtorch_cuda is not loaded (src/ctitan/cuda/cuda_module.h).
  const int visible = choice == config::DeviceChoice::kCpu ? 0 : int(torch::cuda::device_count());
  const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
  const bool one_named = mask != nullptr && *mask != '\0' && std::strchr(mask, ',') == nullptr;
  const auto device = device_for_rank(choice, local_rank, visible, one_named);
  if (device.is_cuda()) {
    // Before any allocation, stream or NCCL communicator: each binds to the current device.
    c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
    chosen_cuda_index = device.index();
  } else {
    chosen_cuda_index = -1;
  }
  return device;
}

c10::Device process_device() {
  const int index = chosen_cuda_index.load();
  return index < 0 ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, c10::DeviceIndex(index));
}

}  // namespace ctitan::distributed
