#include "ctitan/metrics/peak_flops.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace ctitan::metrics {
namespace fs = std::filesystem;

double measure_gemm_flops(torch::ScalarType dtype, int64_t n, int iters) {
  torch::NoGradGuard no_grad;
  auto a = torch::randn({n, n}).to(dtype), b = torch::randn({n, n}).to(dtype);
  auto c = torch::matmul(a, b);  // warm-up: oneDNN picks and JITs its kernel here
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) torch::matmul_out(c, a, b);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * double(n) * double(n) * double(n) * iters / seconds;
}

double peak_gemm_flops(torch::ScalarType dtype) {
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

PeakFlops resolve_peak_flops(double configured, torch::ScalarType dtype) {
  if (configured > 0) return {configured, "metrics.peak_flops"};
  // "best2048_3072": entries cached by the older 2048-only probe are not reused.
  std::string key = fmt::format("{}_threads{}_best2048_3072", c10::toString(dtype), at::get_num_threads());
  auto path = cache_file();
  nlohmann::json cache = nlohmann::json::object();
  if (std::ifstream in(path); in) {
    cache = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!cache.is_object()) cache = nlohmann::json::object();  // a corrupt cache is just re-probed
  }
  if (cache.contains(key) && cache[key].is_number() && cache[key].get<double>() > 0) {
    return {cache[key].get<double>(), fmt::format("{} GEMM probe, cached in {}", c10::toString(dtype), path.string())};
  }
  double flops = peak_gemm_flops(dtype);
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
