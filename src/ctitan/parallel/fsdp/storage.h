#pragma once
// Freeing and re-allocating a tensor's memory in place. FSDP frees an unsharded parameter by
// shrinking its storage to 0 bytes rather than by replacing the tensor: autograd saves views of
// the parameter (a Linear saves weight.t()), and those share the storage, so only a resize of
// the storage itself frees the memory they hold, and only a refill makes backward see the
// re-gathered values through them.
#include <ATen/ATen.h>

namespace ctitan::parallel::fsdp {

// Resizes `t`'s storage to `bytes`; contents are not preserved. CPU (and CUDA with
// CTITAN_WITH_NCCL); other devices throw.
void resize_storage(const at::Tensor& t, size_t bytes);

inline void free_storage(const at::Tensor& t) { resize_storage(t, 0); }
inline void allocate_storage(const at::Tensor& t) { resize_storage(t, size_t(t.numel()) * t.element_size()); }
inline bool storage_allocated(const at::Tensor& t) { return t.storage().nbytes() > 0 || t.numel() == 0; }

}  // namespace ctitan::parallel::fsdp
