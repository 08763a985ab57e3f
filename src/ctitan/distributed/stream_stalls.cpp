#include "ctitan/distributed/stream_stalls.h"

#include <mutex>
#include <vector>

namespace ctitan::distributed {
namespace {

std::mutex stalls_mutex;
std::vector<std::function<double()>> pending_stalls;  // each holds two CUDA events
double measured_seconds = 0;                          // swept from pending_stalls, not yet taken

// Moves the stalls the device has passed into measured_seconds (their events are released).
void sweep_measured() {
  std::vector<std::function<double()>> still_pending;
  for (auto& stall : pending_stalls) {
    const double s = stall();
    if (s < 0) {
      still_pending.push_back(std::move(stall));
    } else {
      measured_seconds += s;
    }
  }
  pending_stalls.swap(still_pending);
}

}  // namespace

void add_stream_stall(std::function<double()> stall) {
  if (!stall) return;
  std::lock_guard<std::mutex> lock(stalls_mutex);
  pending_stalls.push_back(std::move(stall));
  // A program that never takes them (no trainer) must not accumulate events without bound.
  if (pending_stalls.size() >= 1024) sweep_measured();
}

double take_stream_stall_seconds() {
  std::lock_guard<std::mutex> lock(stalls_mutex);
  sweep_measured();
  const double seconds = measured_seconds;
  measured_seconds = 0;
  return seconds;
}

}  // namespace ctitan::distributed
