#include "ctitan/distributed/stream_stalls.h"

#include <mutex>
#include <vector>

namespace ctitan::distributed {
namespace {

std::mutex stalls_mutex;
std::vector<std::function<double()>> pending_stalls;

}  // namespace

void add_stream_stall(std::function<double()> stall) {
  if (!stall) return;
  std::lock_guard<std::mutex> lock(stalls_mutex);
  pending_stalls.push_back(std::move(stall));
}

double take_stream_stall_seconds() {
  std::lock_guard<std::mutex> lock(stalls_mutex);
  double seconds = 0;
  std::vector<std::function<double()>> still_pending;
  for (auto& stall : pending_stalls) {
    const double s = stall();
    if (s < 0) {
      still_pending.push_back(std::move(stall));
    } else {
      seconds += s;
    }
  }
  pending_stalls.swap(still_pending);
  return seconds;
}

}  // namespace ctitan::distributed
