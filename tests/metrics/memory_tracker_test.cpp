#include "ctitan/metrics/memory_tracker.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace ctitan::metrics {
namespace {

TEST(MemoryTracker, CountsLiveBytesAndPeakExactly) {
  install_memory_tracker();
  int64_t before = memory_stats().active_bytes;
  reset_peak_memory();
  {
    auto a = torch::empty({1024, 1024}, torch::kFloat);  // 4 MiB
    auto b = torch::empty({1024, 1024}, torch::kFloat);  // 4 MiB
    EXPECT_EQ(memory_stats().active_bytes - before, 8 * 1024 * 1024);
  }
  EXPECT_EQ(memory_stats().active_bytes, before);
  EXPECT_EQ(memory_stats().peak_bytes - before, 8 * 1024 * 1024);
  reset_peak_memory();
  EXPECT_EQ(memory_stats().peak_bytes, before);
}

TEST(MemoryTracker, ResidentSetIsPositive) { EXPECT_GT(resident_set_bytes(), 0); }

}  // namespace
}  // namespace ctitan::metrics
