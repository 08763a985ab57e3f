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

}  // namespace ctitan::cuda
