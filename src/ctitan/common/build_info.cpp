#include "ctitan/common/build_info.h"

#include <ATen/Context.h>
#include <fmt/format.h>
#include <torch/version.h>

#include <fstream>
#include <thread>

#include "ctitan/cuda/cuda_module.h"

namespace ctitan {

const char* ctitan_version() { return "0.3.0"; }

namespace {

struct CpuInfo {
  std::string model = "unknown";
  std::string flags;  // " flag1 flag2 ... ", padded so that " name " finds whole words
};

CpuInfo read_cpuinfo() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  CpuInfo info;
  while (std::getline(cpuinfo, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0) continue;
    auto key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "model name" && info.model == "unknown") info.model = line.substr(colon + 2);
    if (key == "flags" && info.flags.empty()) info.flags = " " + line.substr(colon + 1) + " ";
  }
  return info;
}

}  // namespace

bool cpu_has_fast_bf16_gemm() {
  auto flags = read_cpuinfo().flags;
  return flags.find(" avx512_bf16 ") != std::string::npos || flags.find(" amx_bf16 ") != std::string::npos;
}

std::string cpu_description() {
  auto info = read_cpuinfo();
  const auto& flags = info.flags;
  const auto& model = info.model;
  // Whether bf16 GEMMs have AMX tiles decides how much of a step is GEMM.
  const char* bf16 = flags.find(" amx_bf16 ") != std::string::npos      ? "AMX bf16 tiles"
                     : flags.find(" avx512_bf16 ") != std::string::npos ? "AVX512-BF16, no AMX"
                                                                         : "no bf16 instructions";
  return fmt::format("{}, {} cores online, {}", model, std::thread::hardware_concurrency(), bf16);
}

std::string aten_cpu_capability() {
  // ATen's dispatcher does not export its capability query; its configuration string names it.
  auto config = at::show_config();
  const std::string key = "CPU capability usage: ";
  auto at = config.find(key);
  if (at == std::string::npos) return "unknown";
  auto start = at + key.size();
  return config.substr(start, config.find('\n', start) - start);
}

std::string build_report() {
  // Compiled and linked; never run on a GPU by ctitan's own tests (the build machines have none).
  const std::string cuda = cuda::module_status();
  const std::string nccl = cuda::nccl_status();
  return fmt::format(
      "ctitan {}\n"
      "libtorch {} (C++ ABI {})\n"
      "CUDA: {}\n"
      "NCCL: {}\n"
      "CPU: {}; ATen vector ISA {}\n",
      ctitan_version(), TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI ? "cxx11" : "pre-cxx11", cuda, nccl, cpu_description(),
      aten_cpu_capability());
}

}  // namespace ctitan
