#pragma once
// ctitan's CUDA half lives in a module of its own, libctitan_cuda.so, with everything that needs
// libtorch_cuda (NCCL process groups, CUDA storage resizing). It is loaded before main() where an
// NVIDIA driver is (libcuda.so.1 loads), and never elsewhere: a process that cannot use a GPU does
// not pay libtorch_cuda's start-up (0.45 s of every process start on the build machine, where the
// suite starts hundreds of ctitan processes; docs/BUILD.md). Where a driver is, nothing changes:
// libtorch_cuda is loaded before any code asks ATen about CUDA, as when it was linked.
//
// CTITAN_CUDA=0 never loads it (a CPU run on a GPU machine); CTITAN_CUDA=1 loads it even without
// a driver (the tests check the module loads and resolves here, where there is no GPU).
#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace ctitan::cuda {

// One line for `ctitan --version`: compiled in or not, loaded or why not, GPUs visible.
std::string module_status();
// The NCCL library's version, or why it is not loaded.
std::string nccl_status();

// A c10d ProcessGroupNCCL over `store`; nullptr when the module is not loaded or no GPU is
// visible (its constructor throws without one).
c10::intrusive_ptr<c10d::Backend> make_nccl_group_if_gpu(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                         int size, std::chrono::milliseconds timeout);

// at::native::resize_bytes_cuda on `t`'s storage; throws when the module is not loaded.
void resize_storage_bytes(const at::Tensor& t, size_t bytes);

// The CUDA caching allocator's counters for one device, as torch.cuda.memory_stats() names them
// and torchtitan's memory monitor reports them.
struct DeviceMemoryStats {
  int64_t allocated_bytes = 0;       // "allocated_bytes.all.current": live tensors
  int64_t peak_allocated_bytes = 0;  // "allocated_bytes.all.peak" since the last reset (torch.cuda.max_memory_allocated)
  int64_t active_bytes = 0;          // "active_bytes.all.current"
  int64_t peak_active_bytes = 0;     // "active_bytes.all.peak"
  int64_t reserved_bytes = 0;        // "reserved_bytes.all.current": held by the allocator
  int64_t peak_reserved_bytes = 0;   // "reserved_bytes.all.peak"
  int64_t alloc_retries = 0;         // "num_alloc_retries": cudaMalloc failed, cache flushed, retried
  int64_t ooms = 0;                  // "num_ooms"
  int64_t capacity_bytes = 0;        // the device's total memory (cudaDeviceProp::totalGlobalMem)
};
// Throws when the module is not loaded.
DeviceMemoryStats device_memory_stats(int device);
// Starts a new peak window on `device` (torch.cuda.reset_peak_memory_stats).
void reset_device_peak_memory(int device);
// The device's name (cudaDeviceProp::name), e.g. "NVIDIA H100 80GB HBM3".
std::string device_name(int device);

// A CUDA event recorded now on the current stream, as a function that says whether the device
// has passed it (cudaEventQuery). An empty function when the module is not loaded.
std::function<bool()> record_stream_marker();

// Runs `wait` (which makes the current stream wait for other work) between two timing events on
// the current stream, and returns the seconds the stream stood still there once the device has
// passed both (-1 before that), without blocking. Without the module: runs `wait`, returns an
// empty function.
std::function<double()> time_stream_wait(const std::function<void()>& wait);

}  // namespace ctitan::cuda
