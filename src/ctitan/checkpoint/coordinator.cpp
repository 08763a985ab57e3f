#include "ctitan/checkpoint/coordinator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>

#include "ctitan/distributed/comm_error.h"

namespace ctitan::checkpoint {
namespace {

class LocalCoordinator : public Coordinator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::vector<std::string> all_gather(const std::string& mine) override { return {mine}; }
};

class StoreCoordinator : public Coordinator {
 public:
  StoreCoordinator(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size)
      : store_(std::move(store)), rank_(rank), world_size_(world_size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  std::vector<std::string> all_gather(const std::string& mine) override {
    const int64_t call = calls_++;
    auto key = [call](int r) { return fmt::format("checkpoint/{}/{}", call, r); };
    store_->set(key(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
    std::vector<std::string> keys;
    for (int r = 0; r < world_size_; ++r) keys.push_back(key(r));
    wait_for(keys, call);
    std::vector<std::string> all(static_cast<size_t>(world_size_));
    for (int r = 0; r < world_size_; ++r) {
      auto bytes = store_->get(keys[size_t(r)]);
      all[size_t(r)].assign(bytes.begin(), bytes.end());
    }
    return all;
  }

  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ms_ = timeout.count(); }

 private:
  // Waits for every rank's key; on timeout, names the ranks whose key is still missing.
  void wait_for(const std::vector<std::string>& keys, int64_t call) {
    const auto timeout = timeout_ms_ > 0 ? std::chrono::milliseconds(timeout_ms_.load()) : store_->getTimeout();
    try {
      store_->wait(keys, timeout);
      return;
    } catch (const std::exception&) {
    }
    std::vector<int> missing;
    for (int r = 0; r < world_size_; ++r) {
      try {
        if (!store_->check({keys[size_t(r)]})) missing.push_back(r);
      } catch (const std::exception&) {
        missing.push_back(r);  // the store itself is gone with rank 0
      }
    }
    throw distributed::CommError(fmt::format(
        "checkpoint exchange #{} timed out after {}s on rank {} of {}: rank(s) {} did not arrive", call,
        std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), rank_, world_size_,
        missing.empty() ? std::string("(none missing at the recheck)") : fmt::format("{}", fmt::join(missing, ", "))));
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_size_;
  int64_t calls_ = 0;
  std::atomic<int64_t> timeout_ms_{0};  // 0: the store's own; set by the training thread, read by the saver's
};

}  // namespace

std::shared_ptr<Coordinator> local_coordinator() { return std::make_shared<LocalCoordinator>(); }

std::shared_ptr<Coordinator> store_coordinator(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size) {
  return std::make_shared<StoreCoordinator>(std::move(store), rank, world_size);
}

std::string join_rank_errors(const std::vector<std::string>& errors) {
  std::string out;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    out += fmt::format("{}rank {}: {}", out.empty() ? "" : "; ", r, errors[r]);
  }
  return out;
}

}  // namespace ctitan::checkpoint
