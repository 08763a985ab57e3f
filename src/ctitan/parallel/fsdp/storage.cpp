#include "ctitan/parallel/fsdp/storage.h"

#include <ATen/native/Resize.h>

#include "ctitan/cuda/cuda_module.h"

namespace ctitan::parallel::fsdp {

void resize_storage(const at::Tensor& t, size_t bytes) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == bytes) return;
  if (t.device().is_cpu()) {
    at::native::resize_bytes_cpu(storage, bytes);
    return;
  }
  if (t.device().is_cuda()) {
    cuda::resize_storage_bytes(t, bytes);  // libctitan_cuda.so: at::native::resize_bytes_cuda
    return;
  }
  TORCH_CHECK(false, "FSDP: cannot resize storage on device ", t.device());
}

}  // namespace ctitan::parallel::fsdp
