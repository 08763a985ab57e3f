#include "ctitan/checkpoint/async_saver.h"

#include <spdlog/spdlog.h>

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
