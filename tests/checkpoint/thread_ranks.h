#pragma once
// Simulated ranks for checkpoint unit tests: N threads in one process, each with a Coordinator
// whose all_gather meets the other threads' in shared memory, as ranks would through the store.
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "ctitan/checkpoint/coordinator.h"

namespace ctitan::testing {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size) {}

  // Runs fn(rank, coordinator) on `size` threads and joins them. The first exception is rethrown.
  void run(const std::function<void(int, checkpoint::Coordinator&)>& fn) {
    std::vector<std::thread> threads;
    std::exception_ptr error;
    std::mutex error_mutex;
    for (int r = 0; r < size_; ++r) {
      threads.emplace_back([&, r] {
        Member member(this, r);
        try {
          fn(r, member);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    if (error) std::rethrow_exception(error);
  }

 private:
  class Member : public checkpoint::Coordinator {
   public:
    Member(ThreadGroup* group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int world_size() const override { return group_->size_; }
    std::vector<std::string> all_gather(const std::string& mine) override { return group_->gather(calls_++, rank_, mine); }

   private:
    ThreadGroup* group_;
    int rank_;
    int64_t calls_ = 0;
  };

  std::vector<std::string> gather(int64_t call, int rank, const std::string& mine) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& slot = rounds_[call];
    if (slot.empty()) slot.resize(size_t(size_), nullptr);
    slot[size_t(rank)] = std::make_shared<std::string>(mine);
    changed_.notify_all();
    changed_.wait(lock, [&] {
      for (const auto& s : rounds_[call]) {
        if (!s) return false;
      }
      return true;
    });
    std::vector<std::string> out;
    for (const auto& s : rounds_[call]) out.push_back(*s);
    return out;
  }

  int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, std::vector<std::shared_ptr<std::string>>> rounds_;
};

}  // namespace ctitan::testing
