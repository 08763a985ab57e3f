#include "ctitan/metrics/peak_flops.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "ctitan/cuda/cuda_module.h"

namespace ctitan::metrics {
namespace fs = std::filesystem;

double measure_gemm_flops(torch::ScalarType dtype, int64_t n, int iters, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto options = torch::TensorOptions(dtype).device(device);
  auto a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  auto c = torch::matmul(a, b);  // warm-up: oneDNN picks and JITs its kernel here (cuBLAS its handle)
  // A GPU runs the products asynchronously: time from an idle device to an idle device.
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) torch::matmul_out(c, a, b);
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * double(n) * double(n) * double(n) * iters / seconds;
}

double peak_gemm_flops(torch::ScalarType dtype, torch::Device device) {
  if (device.is_cuda()) {
    return std::max(measure_gemm_flops(dtype, 4096, 20, device), measure_gemm_flops(dtype, 8192, 10, device));
  }
  // A dtype without a fast GEMM on this CPU (bf16 without AVX-512 takes ATen's scalar fallback)
  // would make the full probe take many minutes; one 1024^3 product says so in seconds.
  double small = measure_gemm_flops(dtype, 1024, 1);
  if (small < 20e9) return small;
  return std::max(measure_gemm_flops(dtype, 2048, 6), measure_gemm_flops(dtype, 3072, 3));
}

static fs::path cache_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path base = xdg ? fs::path(xdg) : fs::path(home ? home : "/tmp") / ".cache";
  return base / "ctitan" / "peak_flops.json";
}

PeakFlops resolve_peak_flops(double configured, torch::ScalarType dtype, torch::Device device) {
  if (configured > 0) return {configured, "metrics.peak_flops"};
  // "best2048_3072": entries cached by the older 2048-only probe are not reused. A GPU's entry is
  // named by its model ("NVIDIA H100 80GB HBM3"): another machine's GPU gets its own probe.
  std::string key = device.is_cuda()
                        ? fmt::format("{}_{}_best4096_8192", c10::toString(dtype), cuda::device_name(device.index()))
                        : fmt::format("{}_threads{}_best2048_3072", c10::toString(dtype), at::get_num_threads());
  auto path = cache_file();
  nlohmann::json cache = nlohmann::json::object();
  if (std::ifstream in(path); in) {
    cache = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!cache.is_object()) cache = nlohmann::json::object();  // a corrupt cache is just re-probed
  }
  if (cache.contains(key) && cache[key].is_number() && cache[key].get<double>() > 0) {
    return {cache[key].get<double>(), fmt::format("{} GEMM probe, cached in {}", c10::toString(dtype), path.string())};
  }
  double flops = peak_gemm_flops(dtype, device);
  cache[key] = flops;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  auto tmp = path.string() + ".tmp." + std::to_string(::getpid());
  if (std::ofstream out(tmp); out) {
    out << cache.dump(2);
    out.close();
    fs::rename(tmp, path, ec);
  }
  return {flops, fmt::format("{} GEMM probe, measured now", c10::toString(dtype))};
}

}  // namespace ctitan::metrics
