#pragma once
// ctitan's deadline for collectives ordered on a device stream (NCCL). There, Work::wait() makes
// the caller's stream wait and returns at once, so its deadline never fires, and NCCL's own
// watchdog would abort with its text. This thread polls each such collective until the device has
// completed it (the c10d works before wait(), then the event wait() recorded) and, past its
// deadline, reports the line a CPU collective's timeout gives (naming the collective and the peers
// that had not issued it: the group's progress board) and marks the group failed.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ctitan/distributed/work.h"

namespace ctitan::distributed {

class StreamWatchdog {
 public:
  using OnTimeout = std::function<void(const std::string& message)>;
  // `on_timeout` runs on the watchdog's thread, once per timed-out collective.
  StreamWatchdog(OnTimeout on_timeout, std::chrono::milliseconds poll_interval);
  ~StreamWatchdog();
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  // Follows `state` (Completion::kStream) until its work is done on the device or its deadline
  // passes. Holds the state, not its tensors beyond what the state itself holds until wait().
  void watch(std::shared_ptr<detail::WorkState> state);
  // Collectives followed now.
  size_t watched() const;

 private:
  void run();

  OnTimeout on_timeout_;
  std::chrono::milliseconds poll_interval_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<std::shared_ptr<detail::WorkState>> states_;
  std::thread thread_;
};

// The process's watchdog: a timed-out collective prints "ctitan: error: <line>" and ends the
// process with exit code 1 (the stream stays blocked: no later host call on it would return, and
// the launcher's restart policy takes over), within the timeout + 1 s.
StreamWatchdog& stream_watchdog();

}  // namespace ctitan::distributed
