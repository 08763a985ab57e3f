#pragma once
// Exposed communication on a GPU. Waiting on NCCL work makes the compute stream wait and returns
// at once, so host time in wait() says nothing; the time the compute stream stood still waiting
// does. Work::wait() brackets each stream wait with two timing events (cuda::time_stream_wait) and
// hands the measurement here; the trainer takes the seconds of those the device has passed, at
// each step, without blocking (the others count in a later window).
#include <functional>

namespace ctitan::distributed {

// `stall`: seconds once measurable, -1 before (cuda::time_stream_wait's result).
void add_stream_stall(std::function<double()> stall);
// Sum of the stalls measurable now, each counted once; pending ones stay for a later call.
double take_stream_stall_seconds();

}  // namespace ctitan::distributed
