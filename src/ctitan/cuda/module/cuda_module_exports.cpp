// libctitan_cuda.so: what ctitan needs from libtorch_cuda, behind four C entry points.
#include "ctitan/cuda/module/cuda_module_exports.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/native/cuda/Resize.h>
#include <c10/cuda/CUDACachingAllocator.h>
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

ctitan::cuda::DeviceMemoryStats ctitan_cuda_device_memory_stats(int device) {
  namespace allocator = c10::cuda::CUDACachingAllocator;
  const auto stats = allocator::getDeviceStats(c10::DeviceIndex(device));
  // StatType::AGGREGATE, index 0 of every stat array: the enum's namespace differs between
  // libtorch versions (c10::CachingDeviceAllocator in 2.11, c10::CachingAllocator in 2.15).
  const size_t all = 0;
  ctitan::cuda::DeviceMemoryStats out;
  out.allocated_bytes = stats.allocated_bytes[all].current;
  out.peak_allocated_bytes = stats.allocated_bytes[all].peak;
  out.active_bytes = stats.active_bytes[all].current;
  out.peak_active_bytes = stats.active_bytes[all].peak;
  out.reserved_bytes = stats.reserved_bytes[all].current;
  out.peak_reserved_bytes = stats.reserved_bytes[all].peak;
  out.alloc_retries = stats.num_alloc_retries;
  out.ooms = stats.num_ooms;
  out.capacity_bytes = int64_t(at::cuda::getDeviceProperties(c10::DeviceIndex(device))->totalGlobalMem);
  return out;
}

void ctitan_cuda_reset_device_peak_memory(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(c10::DeviceIndex(device));
}

std::string ctitan_cuda_device_name(int device) {
  return at::cuda::getDeviceProperties(c10::DeviceIndex(device))->name;
}

std::shared_ptr<void> ctitan_cuda_record_event() {
  auto event = std::make_shared<c10::cuda::CUDAEvent>();  // timing off: the cheapest event
  event->record();                                        // on the current stream
  return event;
}

bool ctitan_cuda_event_done(const std::shared_ptr<void>& event) {
  return static_cast<c10::cuda::CUDAEvent*>(event.get())->query();
}

std::shared_ptr<void> ctitan_cuda_record_timing_event() {
  auto event = std::make_shared<c10::cuda::CUDAEvent>(cudaEventDefault);  // with timing
  event->record();
  return event;
}

double ctitan_cuda_elapsed_ms(const std::shared_ptr<void>& start, const std::shared_ptr<void>& end) {
  auto* a = static_cast<c10::cuda::CUDAEvent*>(start.get());
  auto* b = static_cast<c10::cuda::CUDAEvent*>(end.get());
  if (!a->query() || !b->query()) return -1;
  return a->elapsed_time(*b);
}

}  // extern "C"
