#include "ctitan/distributed/stream_stalls.h"

#include <gtest/gtest.h>

namespace ctitan::distributed {
namespace {

// Stalls the device has passed are summed once; a stall still ahead of the device is neither
// counted nor lost: a later call counts it. Never blocks.
TEST(StreamStalls, EachMeasuredStallIsCountedOnceAndPendingOnesWait) {
  take_stream_stall_seconds();  // whatever an earlier test left
  bool second_done = false;
  add_stream_stall([] { return 0.25; });
  add_stream_stall([&] { return second_done ? 0.5 : -1.0; });
  add_stream_stall({});  // off the GPU: nothing to measure
  EXPECT_DOUBLE_EQ(take_stream_stall_seconds(), 0.25);
  EXPECT_DOUBLE_EQ(take_stream_stall_seconds(), 0.0);
  second_done = true;
  EXPECT_DOUBLE_EQ(take_stream_stall_seconds(), 0.5);
  EXPECT_DOUBLE_EQ(take_stream_stall_seconds(), 0.0);
}

}  // namespace
}  // namespace ctitan::distributed
