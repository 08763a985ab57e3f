#pragma once
// What this binary was built against and what it runs on: `ctitan --version`, and the second line
// of every benchmark, so that figures are only ever compared within one machine and one build.
#include <string>

namespace ctitan {

// "0.3.0".
const char* ctitan_version();

// The CPU model, cores online, and its bf16 GEMM path ("AMX bf16 tiles", "AVX512-BF16, no AMX",
// "no bf16 instructions"): read from /proc/cpuinfo.
std::string cpu_description();

// Whether libtorch has a fast bf16 GEMM on this CPU: bf16 dot-product instructions (AVX512-BF16
// or AMX). AVX-512 alone is not enough: on a Xeon with AVX-512 BW/VL/DQ but neither (2026-11-28)
// the bf16 GEMM probe read 0.025 TFLOP/s against fp32's 0.130, and the demo trained at 434 tokens/s
// in bf16 against 1,577-1,722 in fp32; on AVX2 alone bf16 takes ATen's scalar fallback.
bool cpu_has_fast_bf16_gemm();

// The vector ISA ATen's CPU kernels dispatch to here ("AVX512", "AVX2", "DEFAULT").
std::string aten_cpu_capability();

// Several lines: ctitan's version, libtorch's version and C++ ABI, whether CUDA and NCCL are
// compiled in (and whether a GPU is visible now), and the CPU.
std::string build_report();

}  // namespace ctitan
