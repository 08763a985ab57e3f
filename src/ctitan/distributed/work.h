#pragma once
// Work: the handle of one issued collective, and the per-group failure flag its handles share.
// A collective completes on a backend (Gloo) worker thread; wait() is where the caller learns the
// outcome, gets a CommError on failure or timeout, and where every tensor reference is dropped.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ctitan/distributed/collective_backend.h"
#include "ctitan/distributed/comm_error.h"
#include "ctitan/distributed/comm_stats.h"

namespace ctitan::distributed {

// Once one collective of a group fails or times out, its ranks no longer agree on what was issued:
// every later call on the group fails at once with the first error instead of hanging.
class GroupHealth {
 public:
  void mark_failed(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_) why_ = why;
    failed_ = true;
  }
  bool failed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return failed_;
  }
  std::string why() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return why_;
  }

 private:
  mutable std::mutex mutex_;
  bool failed_ = false;
  std::string why_;
};

namespace detail {

// One in-flight collective. The Communicator fills it, the backend's completion callback runs
// `finish` and sets `done` (on a Gloo worker thread), Work::wait() consumes it (caller's thread).
struct WorkState {
  // Set at issue, read-only afterwards.
  std::string label;      // "all_reduce #17 on group 'dp' (rank 1 of 2, 1048576 x float)"
  std::string stats_key;  // "all_reduce"
  std::chrono::milliseconds timeout{0};
  std::chrono::steady_clock::time_point deadline;  // issue time + timeout
  std::shared_ptr<StatsTable> stats;
  std::shared_ptr<GroupHealth> health;
  // On a timeout: which peers had not issued this collective, e.g. "rank 1 of the group had
  // issued only up to #175" (the group's progress board), or "" when unknown.
  std::function<std::string()> missing_peers;
  double issue_seconds = 0;  // caller time inside the issuing call

  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;     // backend finished and `finish` ran
  bool waited = false;   // wait() has consumed the result
  std::exception_ptr error;
  // The backend operations making up this collective (all_gather is one broadcast per rank);
  // it is done when all are. `pending` counts those not yet finished.
  std::vector<c10::intrusive_ptr<c10d::Work>> backends;
  size_t pending = 0;
  std::exception_ptr backend_error;  // the first backend failure
  // The caller's tensors and any temporaries. Hold them until wait(): the collective reads and
  // writes them asynchronously, so freeing them earlier would corrupt the result; holding them
  // longer would raise peak memory (FSDP frees gathered parameters right after use).
  std::vector<at::Tensor> held;
  // Runs after the backend succeeded, on the backend's thread: copy-back from a wire buffer,
  // the local reduction of reduce_scatter, AVG's division. May capture tensors; it is destroyed
  // before `done` is set, so only `held` keeps them alive after that.
  std::function<void()> finish;
  // kStream (NCCL): wait() calls each c10d work's wait(), which makes the caller's current
  // stream wait for it, then runs `finish` on that stream. kOnWait (Gloo send/recv): wait()
  // blocks in each c10d work's wait(remaining time).
  Completion completion = Completion::kCallback;
  // kStream, after wait(): whether the device has passed the point where the caller's stream
  // waited for the collective (a CUDA event's query), so the watchdog (stream_watchdog.h) can still
  // tell when it completes once `backends` are released. Empty before wait() and off the GPU.
  std::function<bool()> device_done;
};

// "collective timeout: <label> did not complete within <t>s[; <peers that had not issued it>]":
// the one line for a collective past its deadline, from wait() or from the stream watchdog.
std::string timeout_message(const WorkState& s);

}  // namespace detail

class Work {
 public:
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  // Blocks until done, at most until the collective's deadline (issue time + the group's
  // timeout; for point-to-point ops, the start of wait() + the timeout).
  // Throws CommError on timeout or failure. Drops every tensor reference before returning, so
  // a buffer the caller releases afterwards is freed at once. Calling it again is a no-op.
  void wait();
  // True once the result is in the output tensors (wait() will not block).
  bool is_completed();
  const std::string& label() const { return state_->label; }

 private:
  void wait_on_stream();
  void wait_in_backend();
  std::shared_ptr<detail::WorkState> state_;
};

namespace detail {

// Hands `state` its backend works and arms their completion callbacks. Returns the caller's handle.
std::shared_ptr<Work> launch(std::shared_ptr<WorkState> state, std::vector<c10::intrusive_ptr<c10d::Work>> backends);
// For collectives with nothing to move (empty tensors): runs `finish` now and completes.
std::shared_ptr<Work> complete_locally(std::shared_ptr<WorkState> state);

}  // namespace detail

}  // namespace ctitan::distributed
