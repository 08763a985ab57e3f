#pragma once
// The peak FLOP/s that MFU divides by. Measured on the device that trains, not looked up: short
// square GEMMs in the compute dtype, cached per (dtype, threads) on the CPU and per (dtype, device
// name) on a GPU, so startup stays fast.
#include <torch/torch.h>

#include <string>

namespace ctitan::metrics {

struct PeakFlops {
  double flops = 0;       // FLOP/s
  std::string source;     // how it was obtained, printed at startup
};

// Times `iters` n×n×n matmuls on `device` after a warm-up (on a GPU, between device
// synchronizations). Returns FLOP/s.
double measure_gemm_flops(torch::ScalarType dtype, int64_t n = 2048, int iters = 6,
                          torch::Device device = torch::kCPU);

// The best of measure_gemm_flops at two sizes: a peak should not be the one size the BLAS happens
// to handle worse than the model's shapes (seen on a CPU: 2048³ below 2048×768×2048). CPU: 2048 and
// 3072; GPU: 4096 and 8192, large enough to fill an H100's SMs.
double peak_gemm_flops(torch::ScalarType dtype, torch::Device device = torch::kCPU);

// metrics.peak_flops if > 0; otherwise the cached probe for this dtype and thread count (CPU) or
// device name (GPU), or a fresh probe written to $XDG_CACHE_HOME/ctitan/peak_flops.json (or ~/.cache/...).
PeakFlops resolve_peak_flops(double configured, torch::ScalarType dtype, torch::Device device = torch::kCPU);

}  // namespace ctitan::metrics
