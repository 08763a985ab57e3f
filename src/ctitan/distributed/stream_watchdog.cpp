#include "ctitan/distributed/stream_watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace ctitan::distributed {
namespace {

// Whether the device has completed the collective: its c10d works until wait() released them,
// then the event wait() recorded on the stream it made wait. Neither: nothing left on a device.
bool device_completed(detail::WorkState& s) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::function<bool()> device_done;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    works = s.backends;
    device_done = s.device_done;
  }
  if (!works.empty()) {
    return std::all_of(works.begin(), works.end(), [](const auto& w) { return w->isCompleted(); });
  }
  return !device_done || device_done();
}

}  // namespace

StreamWatchdog::StreamWatchdog(OnTimeout on_timeout, std::chrono::milliseconds poll_interval)
    : on_timeout_(std::move(on_timeout)), poll_interval_(poll_interval), thread_([this] { run(); }) {}

StreamWatchdog::~StreamWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StreamWatchdog::watch(std::shared_ptr<detail::WorkState> state) {
  std::lock_guard<std::mutex> lock(mutex_);
  states_.push_back(std::move(state));
}

size_t StreamWatchdog::watched() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return states_.size();
}

void StreamWatchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, poll_interval_, [this] { return stopping_; });
    if (stopping_) return;
    auto states = states_;  // polled without the lock: watch() stays cheap for the issuing thread
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<detail::WorkState>> finished;
    for (const auto& s : states) {
      if (device_completed(*s)) {
        finished.push_back(s);
      } else if (now >= s->deadline) {
        const auto message = detail::timeout_message(*s);
        s->health->mark_failed(message);
        finished.push_back(s);
        on_timeout_(message);
      }
    }
    lock.lock();
    std::erase_if(states_, [&](const auto& s) { return std::find(finished.begin(), finished.end(), s) != finished.end(); });
  }
}

StreamWatchdog& stream_watchdog() {
  // Never destroyed: collectives may still be followed while static destructors run.
  static auto* watchdog = new StreamWatchdog(
      [](const std::string& message) {
        std::fprintf(stderr, "ctitan: error: %s\n", message.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      },
      std::chrono::milliseconds(250));
  return *watchdog;
}

}  // namespace ctitan::distributed
