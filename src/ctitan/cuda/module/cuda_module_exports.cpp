// libctitan_cuda.so: what ctitan needs from libtorch_cuda, behind four C entry points.
#include "ctitan/cuda/module/cuda_module_exports.h"

#include <ATen/native/cuda/Resize.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/cuda.h>

extern "C" {

c10::intrusive_ptr<c10d::Backend> ctitan_cuda_make_nccl_group_if_gpu(const c10::intrusive_ptr<c10d::Store>& store,
                                                                     int rank, int size,
                                                                     std::chrono::milliseconds timeout) {
  if (!torch::cuda::is_available()) return {};
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

void ctitan_cuda_resize_storage_bytes(const at::Tensor& t, size_t bytes) {
  at::native::resize_bytes_cuda(t.storage().unsafeGetStorageImpl(), bytes);
}

int ctitan_cuda_device_count() { return torch::cuda::is_available() ? int(torch::cuda::device_count()) : 0; }

std::string ctitan_cuda_nccl_version() { return c10d::getNcclVersion(); }

}  // extern "C"
