#include "ctitan/checkpoint/async_saver.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace ctitan::checkpoint {
namespace {

int this_thread_nice() { return getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid))); }

// Background checkpoint work runs below training's priority, and only its own thread does:
// the thread that submits keeps its nice value.
TEST(BackgroundWorker, JobsRunAtTheBackgroundNiceValueAndTheCallerKeepsItsOwn) {
  const int caller_before = this_thread_nice();
  std::atomic<int> job_nice{-100};
  {
    BackgroundWorker worker;
    worker.submit([&] { job_nice = this_thread_nice(); });
    worker.wait();
  }
  // Never less nice than the process already was.
  EXPECT_EQ(job_nice.load(), std::max(BackgroundWorker::kBackgroundNice, caller_before));
  EXPECT_EQ(this_thread_nice(), caller_before);
}

}  // namespace
}  // namespace ctitan::checkpoint
