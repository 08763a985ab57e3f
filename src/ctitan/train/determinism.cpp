#include "ctitan/train/determinism.h"

#include <ATen/Context.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "ctitan/common/error.h"

namespace ctitan::train {

void use_deterministic_algorithms(c10::Device device) {
  if (device.is_cuda()) {
    // The two settings NVIDIA documents as reproducible (cuBLAS "Results reproducibility").
    const char* workspace = std::getenv("CUBLAS_WORKSPACE_CONFIG");
    if (workspace == nullptr || *workspace == '\0') {
      setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
    } else if (std::string(workspace) != ":4096:8" && std::string(workspace) != ":16:8") {
      throw ConfigError(fmt::format("debug.deterministic on CUDA needs CUBLAS_WORKSPACE_CONFIG=:4096:8 or :16:8 "
                                    "(the environment has '{}'); unset it or set one of those",
                                    workspace));
    }
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

}  // namespace ctitan::train
