#pragma once
// GPU tests (suite names start with Gpu; ctest label gpu). Each begins with
// CTITAN_SKIP_WITHOUT_CUDA(): without a device the test is skipped with the line "no CUDA device",
// which ctest reports as skipped (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt), never passed.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#define CTITAN_SKIP_WITHOUT_CUDA()                                                   \
  do {                                                                               \
    if (torch::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";          \
  } while (0)
