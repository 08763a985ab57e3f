#include "ctitan/parallel/ddp.h"

#include "ctitan/parallel/end_of_backward.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>
#include <utility>

#include "ctitan/distributed/communicator.h"

namespace ctitan::parallel {

// Runs after AccumulateGrad has added this backward's gradient into param.grad(): the point at
// which that gradient is complete for the step.
class DistributedDataParallel::ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(DistributedDataParallel* ddp, size_t index) : ddp_(ddp), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ddp_->mark_ready(index_);
    return outputs;
  }

 private:
  DistributedDataParallel* ddp_;
  size_t index_;
};

DistributedDataParallel::DistributedDataParallel(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                                                 std::shared_ptr<distributed::Communicator> group,
                                                 double bucket_cap_mb)
    : params_(std::move(named_params)), group_(std::move(group)) {
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : params_) group_->broadcast(p, /*root=*/0);
  }
  // Buckets in reverse registration order: backward produces the last layers' gradients first,
  // so buckets fill, and launch, in the order backward completes them.
  const auto cap = int64_t(bucket_cap_mb * 1024 * 1024);
  bucket_of_.resize(params_.size());
  int64_t bytes = cap;
  for (size_t i = params_.size(); i-- > 0;) {
    int64_t param_bytes = params_[i].second.numel() * int64_t(sizeof(float));
    if (bytes + param_bytes > cap && !(buckets_.size() && buckets_.back().params.empty())) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(i);
    bucket_of_[i] = buckets_.size() - 1;
    bytes += param_bytes;
  }
  for (auto& b : buckets_) {
    int64_t numel = 0;
    for (auto i : b.params) numel += params_[i].second.numel();
    b.flat = torch::empty({numel}, params_[b.params.front()].second.options().dtype(torch::kFloat));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i].second);
    accumulator->add_post_hook(std::make_unique<ReadyHook>(this, i));
    accumulators_.push_back(std::move(accumulator));
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::mark_ready(size_t index) {
  if (!sync_) return;
  if (!callback_queued_) {
    callback_queued_ = true;
    queue_end_of_backward([this] { finish_backward(); });  // after a recomputation's nested backward too
  }
  buckets_[bucket_of_[index]].ready += 1;
  launch_ready_buckets();
}

void DistributedDataParallel::launch_ready_buckets() {
  // Launch strictly in bucket order: every rank must issue the same collectives in the same
  // sequence, whatever order its hooks happened to fire in.
  while (next_to_launch_ < buckets_.size()) {
    auto& b = buckets_[next_to_launch_];
    if (b.ready < b.params.size()) return;
    int64_t offset = 0;
    for (auto i : b.params) {
      const auto& p = params_[i].second;
      auto slice = b.flat.narrow(0, offset, p.numel());
      if (p.grad().defined()) slice.copy_(p.grad().reshape({-1}));
      else slice.zero_();  // a parameter unused this step still takes part, with zeros
      offset += p.numel();
    }
    b.work = group_->all_reduce(b.flat, distributed::ReduceOp::kSum, /*async_op=*/true);
    ++next_to_launch_;
  }
}

void DistributedDataParallel::finish_backward() {
  const auto sync_start = std::chrono::steady_clock::now();
  // Parameters that received no gradient never fired their hook: count them ready now so the
  // remaining buckets still launch, identically on every rank.
  for (auto& b : buckets_) b.ready = b.params.size();
  launch_ready_buckets();
  auto start = std::chrono::steady_clock::now();
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    int64_t offset = 0;
    for (auto i : b.params) {
      auto& p = params_[i].second;
      auto reduced = b.flat.narrow(0, offset, p.numel()).view(p.sizes());
      if (p.grad().defined()) p.mutable_grad().copy_(reduced);
      else p.mutable_grad() = reduced.clone();
      offset += p.numel();
    }
    b.ready = 0;
  }
  const auto end = std::chrono::steady_clock::now();
  exposed_seconds_ += std::chrono::duration<double>(end - start).count();
  grad_sync_seconds_ += std::chrono::duration<double>(end - sync_start).count();
  next_to_launch_ = 0;
  callback_queued_ = false;
}

double DistributedDataParallel::take_grad_sync_seconds() { return std::exchange(grad_sync_seconds_, 0.0); }

double DistributedDataParallel::take_exposed_comm_seconds() {
  double s = exposed_seconds_;
  exposed_seconds_ = 0;
  return s;
}

}  // namespace ctitan::parallel
