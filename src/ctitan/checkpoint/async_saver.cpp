#include "ctitan/checkpoint/async_saver.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace ctitan::checkpoint {

BackgroundWorker::BackgroundWorker() : thread_([this] { run(); }) {}

BackgroundWorker::~BackgroundWorker() {
  wait();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BackgroundWorker::submit(std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !busy_; });
  job_ = std::move(job);
  busy_ = true;
  changed_.notify_all();
}

double BackgroundWorker::wait() {
  auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !busy_; });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void BackgroundWorker::run() {
  // Checkpoint work in the background yields the cores to training: where training's threads fill
  // every core (2 here), a writer at the same priority made the step after each async save 19%
  // slower. Linux keeps a nice value per thread (inherited by threads this one starts); at 10 the
  // writer still gets about a tenth of a busy core, and all of an idle one.
  // Never below the thread's own value: a job started niced stays at least as nice.
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  setpriority(PRIO_PROCESS, tid, std::max(getpriority(PRIO_PROCESS, tid), kBackgroundNice));
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return busy_ || stopping_; });
    if (!busy_) return;  // stopping with nothing to do
    auto job = std::move(job_);
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {  // jobs report their own errors; this is a last resort
      spdlog::error("checkpoint background job failed: {}", e.what());
    }
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace ctitan::checkpoint
