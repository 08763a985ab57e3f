#pragma once
// One background thread for checkpoint work (async writes, retention purges). At most one job is
// in flight: submit() first waits for the previous one, so saves never overlap or reorder.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace ctitan::checkpoint {

class BackgroundWorker {
 public:
  static constexpr int kBackgroundNice = 10;  // the worker thread's nice value (async_saver.cpp says why)

  BackgroundWorker();
  ~BackgroundWorker();  // waits for the job in flight
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

  // Waits for the previous job, then runs `job` on the worker thread.
  void submit(std::function<void()> job);
  // Waits until no job is in flight; returns the seconds spent waiting.
  double wait();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_;
  bool busy_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace ctitan::checkpoint
