#pragma once
// The peak FLOP/s that MFU divides by. On this CPU it is measured, not looked up: short square
// GEMMs in the compute dtype, cached per (dtype, threads) so startup stays fast.
#include <torch/torch.h>

#include <string>

namespace ctitan::metrics {

struct PeakFlops {
  double flops = 0;       // FLOP/s
  std::string source;     // how it was obtained, printed at startup
};

// Times `iters` n×n×n matmuls after a warm-up. Returns FLOP/s.
double measure_gemm_flops(torch::ScalarType dtype, int64_t n = 2048, int iters = 6);

// The best of measure_gemm_flops at n = 2048 and 3072: a peak should not be the one size the
// BLAS happens to handle worse than the model's shapes (seen: 2048³ below 2048×768×2048).
double peak_gemm_flops(torch::ScalarType dtype);

// metrics.peak_flops if > 0; otherwise the cached probe for this dtype and thread count, or a
// fresh probe written to $XDG_CACHE_HOME/ctitan/peak_flops.json (or ~/.cache/...).
PeakFlops resolve_peak_flops(double configured, torch::ScalarType dtype);

}  // namespace ctitan::metrics
