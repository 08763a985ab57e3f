#pragma once
// Branch-free scalar helpers for the fused kernels in ops/: the compiler vectorizes loops made of
// them (ops/ is built with AVX2+FMA), which std::exp and c10::BFloat16's NaN-checking conversions
// prevent.
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

// GCC's inliner gives up on these in some large callers (seen: the bf16 SwiGLU forward called
// fast_exp out of line, which kept its loop scalar and 10x slower); a loop only vectorizes with
// them inlined, so they are forced.
#define CTITAN_KERNEL_INLINE inline __attribute__((always_inline))

namespace ctitan::ops {

CTITAN_KERNEL_INLINE float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

CTITAN_KERNEL_INLINE uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// Storage <-> fp32 math. bf16 is the top half of an fp32; narrowing rounds to nearest even (the
// rounding c10 uses). Inputs are finite in these kernels, so there is no NaN special case.
CTITAN_KERNEL_INLINE float to_float(float x) { return x; }
CTITAN_KERNEL_INLINE float to_float(c10::BFloat16 x) { return bits_to_float(uint32_t(x.x) << 16); }
template <typename T>
CTITAN_KERNEL_INLINE T from_float(float x);
template <>
CTITAN_KERNEL_INLINE float from_float<float>(float x) { return x; }
template <>
CTITAN_KERNEL_INLINE c10::BFloat16 from_float<c10::BFloat16>(float x) {
  uint32_t bits = float_to_bits(x);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return c10::BFloat16(uint16_t(bits >> 16), c10::BFloat16::from_bits());
}

// e^x to about 2 ulp for x in [-87, 88] (Cephes' polynomial); below that it returns ~1e-38
// rather than a denormal or 0, above it ~1.7e38, which no softmax or sigmoid here can tell apart.
// The range is clamped on the integer exponent: a float clamp of x (a compare and select) stops
// GCC from vectorizing loops around this without -ffast-math.
CTITAN_KERNEL_INLINE float fast_exp(float x) {
  // n = round(x / ln2) by the 1.5 * 2^23 trick: floorf does not vectorize without -ffast-math.
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n*ln2, ln2 split for exactness
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = std::min(std::max(int32_t(n), -126), 127);
  return p * bits_to_float(uint32_t(e + 127) << 23);
}

// Calls f(T{}) with T the storage type of `dtype`: float or c10::BFloat16, the two dtypes the
// kernels support. `op` names the caller in the error.
template <typename F>
void dispatch_float_or_bf16(c10::ScalarType dtype, const char* op, F&& f) {
  if (dtype == c10::kBFloat16) f(c10::BFloat16{});
  else if (dtype == c10::kFloat) f(float{});
  else TORCH_CHECK(false, op, " supports float32 and bfloat16, got ", dtype);
}

}  // namespace ctitan::ops
