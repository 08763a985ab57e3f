#pragma once
// The C entry points of libctitan_cuda.so, resolved by name with dlsym (cuda_module.cpp). They
// take and return libtorch's C++ types: the module and the program are built by one compiler
// against one libtorch (the same build tree).
#include <string>

#include "ctitan/cuda/cuda_module.h"  // the libtorch types they take (declared there)

namespace ctitan::cuda {

using MakeNcclGroupFn = c10::intrusive_ptr<c10d::Backend>(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                          int size, std::chrono::milliseconds timeout);
using ResizeStorageBytesFn = void(const at::Tensor& t, size_t bytes);
using DeviceCountFn = int();
using NcclVersionFn = std::string();
using DeviceMemoryStatsFn = DeviceMemoryStats(int device);
using ResetDevicePeakMemoryFn = void(int device);
using DeviceNameFn = std::string(int device);
using RecordEventFn = std::shared_ptr<void>();
using EventDoneFn = bool(const std::shared_ptr<void>& event);
using RecordTimingEventFn = std::shared_ptr<void>();
// Milliseconds from `start` to `end`, or -1 while either is not reached.
using ElapsedMsFn = double(const std::shared_ptr<void>& start, const std::shared_ptr<void>& end);

}  // namespace ctitan::cuda

extern "C" {
ctitan::cuda::MakeNcclGroupFn ctitan_cuda_make_nccl_group_if_gpu;
ctitan::cuda::ResizeStorageBytesFn ctitan_cuda_resize_storage_bytes;
ctitan::cuda::DeviceCountFn ctitan_cuda_device_count;
ctitan::cuda::NcclVersionFn ctitan_cuda_nccl_version;
ctitan::cuda::DeviceMemoryStatsFn ctitan_cuda_device_memory_stats;
ctitan::cuda::ResetDevicePeakMemoryFn ctitan_cuda_reset_device_peak_memory;
ctitan::cuda::DeviceNameFn ctitan_cuda_device_name;
ctitan::cuda::RecordEventFn ctitan_cuda_record_event;
ctitan::cuda::EventDoneFn ctitan_cuda_event_done;
ctitan::cuda::RecordTimingEventFn ctitan_cuda_record_timing_event;
ctitan::cuda::ElapsedMsFn ctitan_cuda_elapsed_ms;
}
