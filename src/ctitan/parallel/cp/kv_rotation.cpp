#include "ctitan/parallel/cp/kv_rotation.h"

#include <chrono>
#include <optional>

namespace ctitan::parallel::cp {
namespace {

// Adds the seconds since `start` to `times`.
void count_wait(RingTimes* times, std::chrono::steady_clock::time_point start) {
  if (times) times->exposed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One hop of the ring: `send` to the next rank, `recv` filled from the previous one. Even ranks
// send first, odd ranks receive first: on NCCL, where a pair's operations run in issue order,
// a ring of ranks that all posted their receive first would wait on each other.
class RingHop {
 public:
  RingHop(distributed::Communicator& group, const torch::Tensor& send, torch::Tensor recv, int tag) {
    const int rank = group.rank(), size = group.size();
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    if (rank % 2 == 0) {
      send_ = group.isend(send, next, tag);
      recv_ = group.irecv(std::move(recv), prev, tag);
    } else {
      recv_ = group.irecv(std::move(recv), prev, tag);
      send_ = group.isend(send, next, tag);
    }
  }
  void wait(RingTimes* times) {
    const auto start = std::chrono::steady_clock::now();
    recv_->wait();
    send_->wait();
    count_wait(times, start);
  }

 private:
  std::shared_ptr<distributed::Work> send_, recv_;
};

// Tags: the keys and values of step s travel as 2s, their gradients as 2s + 1.
int kv_tag(int64_t step) { return int(2 * step); }
int grad_tag(int64_t step) { return int(2 * step + 1); }

class RingRotation final : public KvRotation {
 public:
  RingRotation(distributed::Communicator& group, torch::Tensor local, RingTimes* times)
      : group_(group), held_(std::move(local)), times_(times) {}

  torch::Tensor keys(int64_t step) override {
    if (hop_) {  // posted by the previous step
      hop_->wait(times_);
      hop_.reset();
      held_ = incoming_;
    }
    if (step + 1 < group_.size()) {  // the next keys travel while this step computes
      incoming_ = torch::empty_like(held_);
      hop_.emplace(group_, held_, incoming_, kv_tag(step));
    }
    return held_;
  }

  void add_grad(int64_t step, const torch::Tensor& grad) override {
    if (step == 0) {  // this rank's queries against its own keys: kept here until own_grad()
      own_ = grad;
      return;
    }
    // The sum for step s's keys starts at the rank after their owner (step 1) and gathers one
    // rank's contribution per hop; it reaches the owner after cp - 1 hops.
    auto sum = grad;
    if (grad_hop_) {  // the previous rank's sum for the same keys so far
      grad_hop_->wait(times_);
      grad_hop_.reset();
      sum = sum + grad_incoming_;
    }
    grad_incoming_ = torch::empty_like(sum);
    grad_hop_.emplace(group_, sum, grad_incoming_, grad_tag(step));  // its Work holds `sum` until the wait
  }

  torch::Tensor own_grad() override {
    if (!grad_hop_) return own_;  // a group of one
    grad_hop_->wait(times_);
    grad_hop_.reset();
    return own_ + grad_incoming_;  // every other rank's sum for this rank's keys
  }

 private:
  distributed::Communicator& group_;
  torch::Tensor held_, incoming_;
  std::optional<RingHop> hop_;
  torch::Tensor own_, grad_incoming_;
  std::optional<RingHop> grad_hop_;
  RingTimes* times_;
};

class AllGatherRotation final : public KvRotation {
 public:
  AllGatherRotation(distributed::Communicator& group, torch::Tensor local, RingTimes* times)
      : group_(group), local_(std::move(local)), times_(times) {
    // (cp, 2, B, Tl, H_kv, D): rank i's keys at [i]. Started now, waited for after step 0.
    gathered_ = torch::empty(prepend(group_.size(), local_.sizes()), local_.options());
    gather_ = group_.all_gather_into_tensor(gathered_, local_, /*async_op=*/true);
  }

  torch::Tensor keys(int64_t step) override {
    if (step == 0) return local_;
    if (gather_) {
      const auto start = std::chrono::steady_clock::now();
      gather_->wait();
      count_wait(times_, start);
      gather_.reset();
    }
    return gathered_[source(step)];
  }

  void add_grad(int64_t step, const torch::Tensor& grad) override {
    if (!grads_.defined()) grads_ = torch::zeros(prepend(group_.size(), grad.sizes()), grad.options());
    grads_[source(step)].add_(grad);
  }

  torch::Tensor own_grad() override {
    // Every rank's contributions to each rank's keys, summed onto their owner.
    auto own = torch::empty(grads_.sizes().slice(1), grads_.options());
    const auto start = std::chrono::steady_clock::now();
    group_.reduce_scatter_tensor(own, grads_, distributed::ReduceOp::kSum);
    count_wait(times_, start);
    return own;
  }

 private:
  static std::vector<int64_t> prepend(int64_t n, c10::IntArrayRef sizes) {
    std::vector<int64_t> out{n};
    out.insert(out.end(), sizes.begin(), sizes.end());
    return out;
  }
  int64_t source(int64_t step) const { return (group_.rank() - step + group_.size()) % group_.size(); }

  distributed::Communicator& group_;
  torch::Tensor local_, gathered_, grads_;
  std::shared_ptr<distributed::Work> gather_;
  RingTimes* times_;
};

}  // namespace

std::unique_ptr<KvRotation> make_rotation(config::CpRotateMethod method, distributed::Communicator& group,
                                          torch::Tensor local, RingTimes* times) {
  // A group of one has nothing to rotate: the ring's step 0 is all of it.
  if (method == config::CpRotateMethod::kAllToAll || group.size() == 1) {
    return std::make_unique<RingRotation>(group, std::move(local), times);
  }
  return std::make_unique<AllGatherRotation>(group, std::move(local), times);
}

}  // namespace ctitan::parallel::cp
