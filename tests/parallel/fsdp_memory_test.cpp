// What FSDP holds for a while, as the memory tracker counts it: tagged bytes, and the tagged
// bytes at the moment of the peak.
#include <gtest/gtest.h>

#include <numeric>

#include "ctitan/metrics/memory_tracker.h"

namespace ctitan::parallel {
namespace {

using metrics::MemoryTag;

int64_t tagged(const metrics::MemoryStats& s, MemoryTag tag) { return s.tagged_bytes[size_t(tag)]; }
int64_t tagged_total(const metrics::MemoryStats& s) {
  return std::accumulate(s.tagged_bytes.begin(), s.tagged_bytes.end(), int64_t(0));
}

// The tracker copies the tagged counters when it records a peak, and only then; re-tagging moves
// bytes between tags without raising the high water.
TEST(FsdpMemory, TrackerCopiesTheTaggedBytesAtThePeak) {
  metrics::install_memory_tracker();
  constexpr int64_t kMiB = 1 << 20;
  const auto base = metrics::memory_stats();
  metrics::reset_peak_memory();
  torch::Tensor comm;
  {
    metrics::MemoryTagScope scope(MemoryTag::kCommBuffers);
    comm = torch::empty({kMiB}, torch::kByte);
  }
  auto grads = torch::empty({2 * kMiB}, torch::kByte);  // untagged until tagged below
  metrics::tag_storage(grads, MemoryTag::kUnshardedGrads);
  auto at_peak = metrics::memory_stats();
  EXPECT_EQ(tagged(at_peak, MemoryTag::kCommBuffers) - tagged(base, MemoryTag::kCommBuffers), kMiB);
  EXPECT_EQ(tagged(at_peak, MemoryTag::kUnshardedGrads) - tagged(base, MemoryTag::kUnshardedGrads), 2 * kMiB);
  // The peak was the untagged allocation of `grads`: the copy then held only `comm`.
  EXPECT_EQ(at_peak.peak_tagged_bytes[size_t(MemoryTag::kCommBuffers)] - tagged(base, MemoryTag::kCommBuffers), kMiB);
  EXPECT_EQ(at_peak.peak_tagged_bytes[size_t(MemoryTag::kUnshardedGrads)], tagged(base, MemoryTag::kUnshardedGrads));
  metrics::tag_storage(grads, MemoryTag::kCommBuffers);
  comm = torch::Tensor();
  auto smaller = torch::empty({kMiB / 2}, torch::kByte);  // below the peak: nothing copied
  auto after = metrics::memory_stats();
  EXPECT_EQ(after.peak_tagged_bytes, at_peak.peak_tagged_bytes);
  EXPECT_EQ(tagged(after, MemoryTag::kCommBuffers) - tagged(base, MemoryTag::kCommBuffers), 2 * kMiB);
  EXPECT_EQ(after.tagged_high_water_bytes - tagged_total(base), 3 * kMiB);
  grads = torch::Tensor();
  EXPECT_EQ(tagged_total(metrics::memory_stats()), tagged_total(base));
}

}  // namespace
}  // namespace ctitan::parallel
