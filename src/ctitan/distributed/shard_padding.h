#pragma once
// Sizes for sharding a flat buffer of `numel` elements over `world` ranks when numel is not a
// multiple of world. all_gather_into_tensor / reduce_scatter_tensor take exactly world * n
// elements; FSDP pads the flat buffer with zeros up to padded_numel() and ignores the tail.
//
//   numel = 10, world = 4: shard n = 3, padded 12; rank 3 holds elements 9..11 of which only
//   9 is real (valid_shard_numel = 1), elements 10 and 11 are padding.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace ctitan::distributed {

// Elements per rank after padding: ceil(numel / world).
inline int64_t padded_shard_numel(int64_t numel, int64_t world) {
  if (numel < 0 || world < 1) throw std::invalid_argument("padded_shard_numel: numel >= 0 and world >= 1 required");
  return (numel + world - 1) / world;
}

// The padded flat length: world * padded_shard_numel.
inline int64_t padded_numel(int64_t numel, int64_t world) { return world * padded_shard_numel(numel, world); }

// Where `rank`'s shard starts in the unpadded buffer.
inline int64_t shard_offset(int64_t numel, int64_t world, int64_t rank) {
  return rank * padded_shard_numel(numel, world);
}

// How many of `rank`'s shard elements are real data (the rest is padding); 0 for ranks wholly
// in the padding, e.g. numel 1 over world 4 gives 1, 0, 0, 0.
inline int64_t valid_shard_numel(int64_t numel, int64_t world, int64_t rank) {
  int64_t n = padded_shard_numel(numel, world);
  return std::clamp<int64_t>(numel - rank * n, 0, n);
}

// `flat` (any shape, read as 1-D) zero-padded to padded_numel(numel, world), on its own device
// and dtype; `flat` itself (flattened, no copy when contiguous) when no padding is needed.
inline at::Tensor pad_for_sharding(const at::Tensor& flat, int64_t world) {
  auto v = flat.reshape({-1});
  int64_t padded = padded_numel(v.numel(), world);
  if (padded == v.numel()) return v;
  auto out = at::zeros({padded}, v.options());
  out.narrow(0, 0, v.numel()).copy_(v);
  return out;
}

}  // namespace ctitan::distributed
