#include "ctitan/ops/sum_of_squares.h"

#include <ATen/Parallel.h>

#include "ctitan/ops/fusion_switch.h"
#include "ctitan/ops/scalar_math.h"

namespace ctitan::ops {
namespace {

template <typename T>
double sum_sq(const T* x, int64_t n) {
  constexpr int64_t kGrain = 1 << 15;
  // Per-chunk partial sums in fp32 (short runs, so no drift), combined in double.
  int64_t chunks = (n + kGrain - 1) / kGrain;
  std::vector<double> partial(size_t(std::max<int64_t>(chunks, 1)), 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      int64_t lo = c * kGrain, hi = std::min(n, lo + kGrain);
      float acc[16] = {};
      int64_t i = lo;
      for (; i + 16 <= hi; i += 16) {
        for (int k = 0; k < 16; ++k) {
          float v = to_float(x[i + k]);
          acc[k] += v * v;
        }
      }
      double total = 0;
      for (; i < hi; ++i) total += double(to_float(x[i])) * to_float(x[i]);
      for (float a : acc) total += a;
      partial[size_t(c)] = total;
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace

double sum_of_squares(const std::vector<torch::Tensor>& tensors) {
  double total = 0;
  static const bool fused = fused_enabled("grad_norm");
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (!fused || !t.is_cpu()) {
      total += t.to(torch::kFloat).pow(2).sum().item<double>();
      continue;
    }
    auto x = t.contiguous();
    if (x.scalar_type() == torch::kBFloat16) total += sum_sq(x.data_ptr<c10::BFloat16>(), x.numel());
    else total += sum_sq(x.to(torch::kFloat).data_ptr<float>(), x.numel());
  }
  return total;
}

}  // namespace ctitan::ops
