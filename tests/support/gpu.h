#pragma once
// GPU tests (suite names start with Gpu; ctest label gpu). Each begins with
// CTITAN_SKIP_WITHOUT_CUDA(): without a device the test is skipped with the line "no CUDA device",
// and its suite's ctest entry exits 77, which ctest reports as skipped (support/test_main.cpp),
// never passed.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#define CTITAN_SKIP_WITHOUT_CUDA()                                                   \
  do {                                                                               \
    if (torch::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";          \
  } while (0)
