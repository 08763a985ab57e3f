#pragma once
// The peak FLOP/s that MFU divides by. On this CPU it is measured, not looked up: a short
// square GEMM in the compute dtype, cached per (dtype, threads) so startup stays fast.
#include <torch/torch.h>

#include <string>

namespace ctitan::metrics {

struct PeakFlops {
  double flops = 0;       // FLOP/s
  std::string source;     // how it was obtained, printed at startup
};

// Times `iters` n×n×n matmuls after a warm-up. Returns FLOP/s.
double measure_gemm_flops(torch::ScalarType dtype, int64_t n = 2048, int iters = 6);

// metrics.peak_flops if > 0; otherwise the cached probe for this dtype and thread count, or a
// fresh probe written to $XDG_CACHE_HOME/ctitan/peak_flops.json (or ~/.cache/...).
PeakFlops resolve_peak_flops(double configured, torch::ScalarType dtype);

}  // namespace ctitan::metrics
