#include "ctitan/distributed/work.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "ctitan/common/message_text.h"
#include "ctitan/cuda/cuda_module.h"
#include "ctitan/distributed/stream_stalls.h"

namespace ctitan::distributed {
namespace {

using Clock = std::chrono::steady_clock;

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return first_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return first_line(e.what());
  } catch (...) {
    return "unknown error";
  }
}

std::string seconds_text(std::chrono::milliseconds t) { return fmt::format("{:g}s", t.count() / 1000.0); }


// A backend's failure as one line. Gloo's own timeout (fixed when the group was created, or a
// send/recv's wait) reads as ours, with its text.
std::string failure_message(const detail::WorkState& s, const std::string& what) {
  const bool timed_out = what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos;
  return timed_out ? detail::timeout_message(s) + " (" + what + ")" : fmt::format("collective failed: {}: {}", s.label, what);
}

// Runs on the backend thread that completed the collective (or inline if it already had).
void complete(const std::shared_ptr<detail::WorkState>& s, std::exception_ptr error) {
  std::function<void()> finish;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    finish = std::move(s->finish);
    s->finish = nullptr;
  }
  if (!error && finish) {
    try {
      finish();
    } catch (...) {
      error = std::current_exception();
    }
  }
  finish = nullptr;  // temporaries captured by `finish` die here, before anyone is told `done`
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->error = error;
    s->done = true;
  }
  s->done_cv.notify_all();
}

// The backend's worker thread still holds its own reference to each c10d work (and through it
// to the tensors) for a moment after signalling completion: microseconds, or a few milliseconds
// when the cores are busy. Wait for it to let go, so that after wait() the caller holds the only
// references and freeing a buffer frees it then. (Bounded: a stuck reference costs 1 s, not a hang.)
void release_backends(std::vector<c10::intrusive_ptr<c10d::Work>>& backends) {
  auto give_up = Clock::now() + std::chrono::seconds(1);
  for (auto& backend : backends) {
    while (backend.use_count() > 1 && Clock::now() < give_up) std::this_thread::yield();
  }
  backends.clear();
}

}  // namespace

std::string detail::timeout_message(const detail::WorkState& s) {
  std::string missing = s.missing_peers ? s.missing_peers() : "";
  return fmt::format("collective timeout: {} did not complete within {}{}", s.label, seconds_text(s.timeout),
                     missing.empty() ? "" : "; " + missing);
}

void Work::wait() {
  auto& s = *state_;
  auto start = Clock::now();
  if (s.completion == Completion::kStream) return wait_on_stream();
  if (s.completion == Completion::kOnWait) return wait_in_backend();
  std::unique_lock<std::mutex> lock(s.mutex);
  if (s.waited) return;
  if (!s.done_cv.wait_until(lock, s.deadline, [&] { return s.done; })) {
    // The backend thread may stay blocked until Gloo's own timeout; the tensors stay referenced
    // by it, and the group is unusable from here on.
    auto message = detail::timeout_message(s);
    s.health->mark_failed(message);
    s.stats->add_seconds(s.stats_key, std::chrono::duration<double>(Clock::now() - start).count());
    throw CommError(message);
  }
  s.waited = true;
  auto error = s.error;
  lock.unlock();

  release_backends(s.backends);
  s.held.clear();
  s.stats->add_seconds(s.stats_key,
                       s.issue_seconds + std::chrono::duration<double>(Clock::now() - start).count());
  if (error) {
    auto message = failure_message(s, what_of(error));  // Gloo's timeout can fire before ours
    s.health->mark_failed(message);
    throw CommError(message);
  }
}

void Work::wait_on_stream() {
  auto& s = *state_;
  auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.waited) return;
    s.waited = true;
  }
  try {
    // c10d's NCCL wait(): the current stream waits on the collective's end event. The deadline is
    // the stream watchdog's (stream_watchdog.h), NCCL's own watchdog the fallback. Timed on the
    // device: how long the stream stands still here is the exposed communication.
    add_stream_stall(cuda::time_stream_wait([&] {
      for (auto& backend : s.backends) backend->wait();
    }));
    if (s.finish) s.finish();
  } catch (const std::exception& e) {
    auto message = fmt::format("collective failed: {}: {}", s.label, first_line(e.what()));
    s.health->mark_failed(message);
    throw CommError(message);
  }
  // The stream now waits for the collective; the watchdog follows it through an event recorded
  // here, so the c10d works (and the tensors they keep) can go now, not when the device gets there.
  auto device_done = cuda::record_stream_marker();
  std::vector<c10::intrusive_ptr<c10d::Work>> released;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.device_done = std::move(device_done);
    released.swap(s.backends);
  }
  released.clear();
  s.finish = nullptr;
  s.held.clear();
  s.stats->add_seconds(s.stats_key,
                       s.issue_seconds + std::chrono::duration<double>(Clock::now() - start).count());
}

void Work::wait_in_backend() {
  auto& s = *state_;
  auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.waited) return;
  }
  // Receives are posted ahead of need, so the deadline counts from here, not from the issue.
  const auto deadline = start + s.timeout;
  std::string message;  // "" on success
  try {
    for (auto& backend : s.backends) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0 || !backend->wait(left)) {
        message = detail::timeout_message(s);
        break;
      }
    }
  } catch (const std::exception& e) {
    message = failure_message(s, first_line(e.what()));
  }
  s.stats->add_seconds(s.stats_key, s.issue_seconds + std::chrono::duration<double>(Clock::now() - start).count());
  if (!message.empty()) {
    // The transport may still write into the buffers (a receive stays posted), so they stay
    // held, and the group is unusable from here on.
    s.health->mark_failed(message);
    throw CommError(message);
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.waited = true;
    s.done = true;
  }
  release_backends(s.backends);
  s.held.clear();
}

bool Work::is_completed() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->completion == Completion::kStream) {
    return std::all_of(state_->backends.begin(), state_->backends.end(),
                       [](const auto& backend) { return backend->isCompleted(); });
  }
  return state_->done;
}

namespace detail {

std::shared_ptr<Work> launch(std::shared_ptr<WorkState> state, std::vector<c10::intrusive_ptr<c10d::Work>> backends) {
  if (state->completion != Completion::kCallback && !backends.empty()) {
    state->backends = std::move(backends);
    return std::make_shared<Work>(std::move(state));
  }
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;
  for (auto& b : backends) futures.push_back(b->getFuture());
  state->backends = std::move(backends);
  state->pending = futures.size();
  if (futures.empty()) return complete_locally(std::move(state));
  // The callbacks own `state`, so a collective whose handle was dropped unwaited still finishes
  // (copy-back, reduction) instead of leaving its output half-written.
  for (auto& future : futures) {
    future->addCallback([state](c10::ivalue::Future& f) {
      std::exception_ptr error;
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (f.hasError() && !state->backend_error) state->backend_error = f.exception_ptr();
        if (--state->pending > 0) return;
        error = state->backend_error;
      }
      complete(state, error);
    });
  }
  return std::make_shared<Work>(std::move(state));
}

std::shared_ptr<Work> complete_locally(std::shared_ptr<WorkState> state) {
  complete(state, nullptr);
  return std::make_shared<Work>(std::move(state));
}

}  // namespace detail
}  // namespace ctitan::distributed
