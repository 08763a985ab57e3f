#pragma once
// ScratchPool: reusable temporaries for collectives (reduce_scatter's receive buffer, all_reduce's
// fp32 wire for 16-bit floats). A fresh multi-MB buffer pays a page fault per 4 KB page on first
// touch (glibc hands blocks over 32 MB straight back to the kernel), and on this machine that
// costs more than moving the data: 64 MB took ~100 ms to allocate and fill, ~30 ms to copy.
//
// Memory cost: at most one idle buffer per pool, the largest given back (for FSDP, about one
// layer's unsharded gradient). Buffers in use by in-flight collectives are not pooled.
#include <ATen/ATen.h>

#include <mutex>

namespace ctitan::distributed {

class ScratchPool {
 public:
  // A contiguous 1-D tensor of `numel` elements of `options`' dtype and device, uninitialised.
  at::Tensor take(int64_t numel, const at::TensorOptions& options) {
    const int64_t bytes = numel * int64_t(options.dtype().itemsize());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (idle_.defined() && idle_.numel() >= bytes && idle_.device() == options.device()) {
        auto buffer = std::move(idle_);
        idle_ = at::Tensor();
        return buffer.narrow(0, 0, bytes).view(options.dtype().toScalarType());
      }
    }
    return at::empty({bytes}, options.dtype(at::kByte)).view(options.dtype().toScalarType());
  }

  // Hands a buffer from take() back once nothing reads or writes it any more.
  void give_back(const at::Tensor& buffer) {
    // The whole allocation, as bytes, whatever slice of it take() returned.
    auto storage = buffer.storage();
    auto whole = at::empty({0}, buffer.options().dtype(at::kByte))
                     .set_(storage, 0, {int64_t(storage.nbytes())}, {1});
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.defined() || idle_.numel() < whole.numel()) idle_ = std::move(whole);
  }

  int64_t idle_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return idle_.defined() ? idle_.numel() : 0;
  }

 private:
  mutable std::mutex mutex_;
  at::Tensor idle_;  // uint8, the whole allocation
};

}  // namespace ctitan::distributed
