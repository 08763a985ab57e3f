#pragma once
// debug.deterministic: deterministic kernels only, on the CPU and on CUDA.
#include <c10/core/Device.h>

namespace ctitan::train {

// Makes ATen use deterministic algorithms only. On CUDA, cuBLAS is deterministic only with a fixed
// workspace (CUBLAS_WORKSPACE_CONFIG = :4096:8 or :16:8, read when its first handle is made, so
// call this before the first matmul): set to :4096:8 when unset; another value is refused with a
// ConfigError naming it. cuDNN gets its deterministic algorithms and no benchmarking.
void use_deterministic_algorithms(c10::Device device);

}  // namespace ctitan::train
