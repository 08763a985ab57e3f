#pragma once
// Lane-parallel row reductions for the fused kernels.
//
// GCC keeps a float reduction (`sum += f(j)`, `m = max(m, f(j))`) in source order, which is
// scalar, unless -ffast-math lets it reassociate; the whole loop then stays scalar, including a
// fast_exp inside it. Accumulating into kLanes independent partial results is a reassociation we
// choose ourselves: the fixed-trip-count inner loop vectorizes, and the order of additions is
// fixed, so the result does not depend on threads or build flags.
#include <algorithm>
#include <cstdint>
#include <limits>

namespace ctitan::ops {

constexpr int64_t kLanes = 16;

// Sum of f(j) for j in [0, n). f may also store (it is called exactly once per j, in order within
// each lane).
template <typename F>
inline float lane_sum(int64_t n, F&& f) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) acc[k] += f(j + k);
  float tail = 0;
  for (; j < n; ++j) tail += f(j);
  for (int64_t width = kLanes / 2; width > 0; width /= 2)
    for (int64_t k = 0; k < width; ++k) acc[k] += acc[k + width];
  return acc[0] + tail;
}

// Max of f(j) for j in [0, n); -inf when n == 0. GCC does not vectorize a compare-and-select
// over an array of lanes the way it does a sum, so the lanes are a GCC/Clang vector type.
template <typename F>
inline float lane_max(int64_t n, F&& f) {
  typedef float Vec8 __attribute__((vector_size(32)));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  Vec8 acc0 = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf}, acc1 = acc0;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    Vec8 v0, v1;
    for (int k = 0; k < 8; ++k) {
      v0[k] = f(j + k);
      v1[k] = f(j + 8 + k);
    }
    acc0 = acc0 < v0 ? v0 : acc0;
    acc1 = acc1 < v1 ? v1 : acc1;
  }
  float m = kNegInf;
  for (int k = 0; k < 8; ++k) m = std::max(m, std::max(acc0[k], acc1[k]));
  for (; j < n; ++j) m = std::max(m, f(j));
  return m;
}

}  // namespace ctitan::ops
