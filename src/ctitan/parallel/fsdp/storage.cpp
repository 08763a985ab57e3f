#include "ctitan/parallel/fsdp/storage.h"

#include <ATen/native/Resize.h>

#ifdef CTITAN_WITH_NCCL
#include <ATen/native/cuda/Resize.h>
#endif

namespace ctitan::parallel::fsdp {

void resize_storage(const at::Tensor& t, size_t bytes) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == bytes) return;
  if (t.device().is_cpu()) {
    at::native::resize_bytes_cpu(storage, bytes);
    return;
  }
#ifdef CTITAN_WITH_NCCL
  if (t.device().is_cuda()) {
    at::native::resize_bytes_cuda(storage, bytes);
    return;
  }
#endif
  TORCH_CHECK(false, "FSDP: cannot resize storage on device ", t.device());
}

}  // namespace ctitan::parallel::fsdp
