// `ctitan --version` tells what the binary was built against; checked against the venv's torch,
// which is where the build found libtorch (an independent report of the same facts).
#include <gtest/gtest.h>

#include <torch/version.h>

#include "support/test_support.h"

namespace ctitan {
namespace {

std::string trimmed(std::string s) { return s.substr(0, s.find_last_not_of(" \n") + 1); }

TEST(CliVersion, NamesLibtorchCudaAndTheCpu) {
  auto r = testing::run_ctitan({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ctitan "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::string("libtorch ") + TORCH_VERSION), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ATen vector ISA"), std::string::npos) << r.output;
  if (!testing::have_python()) GTEST_SKIP() << "no venv Python (own libtorch): the cross-check against torch is skipped";
  // torch.__version__ is "2.15.0+cu132"; the C++ headers say "2.15.0".
  auto torch = testing::run_python(
      {"-c", "import torch; print(torch.__version__.split('+')[0]); print(torch.version.cuda is not None)"});
  ASSERT_EQ(torch.exit_code, 0) << torch.output;
  auto lines = trimmed(torch.output);
  auto version = lines.substr(0, lines.find('\n'));
  bool cuda_build = lines.substr(lines.find('\n') + 1) == "True";
  EXPECT_NE(r.output.find("libtorch " + version), std::string::npos) << r.output;
  const char* expected = cuda_build ? "CUDA: compiled in" : "CUDA: not compiled in";
  EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
}

// libctitan_cuda.so holds what needs libtorch_cuda and is loaded only where an NVIDIA driver is
// (src/ctitan/cuda/cuda_module.h). Forced with CTITAN_CUDA=1 it must load here too, where there is
// no GPU, and resolve its entry points: the NCCL version comes from the wheel's libnccl through it.
// CTITAN_CUDA=0 keeps it out even where a driver is.
TEST(CliCudaModule, LoadsWhenAskedAndStaysOutWhenTold) {
#ifndef CTITAN_WITH_NCCL
  GTEST_SKIP() << "CPU libtorch: no libctitan_cuda.so to load";
#else
  auto forced = testing::run_program("/usr/bin/env", {"CTITAN_CUDA=1", CTITAN_BIN, "--version"});
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(forced.output.find("CUDA: compiled in (libctitan_cuda.so, loaded); "), std::string::npos) << forced.output;
  EXPECT_NE(forced.output.find("NCCL: compiled in, library 2."), std::string::npos) << forced.output;
  auto refused = testing::run_program("/usr/bin/env", {"CTITAN_CUDA=0", CTITAN_BIN, "--version"});
  ASSERT_EQ(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("CUDA: compiled in (libctitan_cuda.so), not loaded (CTITAN_CUDA=0)"),
            std::string::npos) << refused.output;
#endif
}

}  // namespace
}  // namespace ctitan
