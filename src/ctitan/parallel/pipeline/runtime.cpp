#include "ctitan/parallel/pipeline/runtime.h"

#include "ctitan/parallel/pipeline/issue_order.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <stdexcept>

namespace ctitan::parallel::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string text_of(const Action& a) { return to_string(std::vector<Action>{a}); }

}  // namespace

PipelineRuntime::PipelineRuntime(PipeShape shape, ScheduleKind kind, int pp_rank,
                                 std::shared_ptr<distributed::Communicator> pp_group, BoundarySpec boundary,
                                 StageFunctions stage)
    : shape_(shape), kind_(kind), pp_rank_(pp_rank), group_(std::move(pp_group)), boundary_(std::move(boundary)),
      stage_(std::move(stage)) {
  // Every rank lowers every rank's plan the same way, so each knows what its peers post. NCCL
  // (activations on a GPU) completes each pair's operations in issue order: issue_order.h.
  const auto orders = compute_orders(kind, shape_);
  actions_ = (boundary_.device.is_cuda() ? lower_in_issue_order(orders, shape_) : lower(orders, shape_))
                 .at(size_t(pp_rank_));
  std::map<int32_t, size_t> last_backward_of_stage;
  for (size_t i = 0; i < actions_.size(); ++i) {
    if (actions_[i].op == Op::B) last_backward_of_stage[actions_[i].stage] = i;
  }
  for (const auto& [stage, index] : last_backward_of_stage) last_backwards_.insert(index);
  for (int s = pp_rank_; s < shape_.stages(); s += shape_.pp) local_stages_.push_back(s);
}

int64_t PipelineRuntime::microbatch_rows(const torch::Tensor& inputs) const {
  if (inputs.size(0) % shape_.microbatches != 0) {
    throw std::logic_error(fmt::format("pipeline: a local batch of {} rows does not split into {} microbatches",
                                       inputs.size(0), shape_.microbatches));
  }
  return inputs.size(0) / shape_.microbatches;
}

torch::Tensor PipelineRuntime::evaluate(const torch::Tensor& inputs, const torch::Tensor& labels) {
  torch::NoGradGuard no_grad;
  const int64_t rows = microbatch_rows(inputs);
  auto loss_sum = torch::zeros({}, torch::TensorOptions(torch::kFloat).device(boundary_.device));
  for (int32_t mb = 0; mb < shape_.microbatches; ++mb) {
    for (int s : local_stages_) {
      torch::Tensor input = inputs.narrow(0, mb * rows, rows);
      if (s > 0) {
        input = torch::empty(boundary_.shape, torch::TensorOptions(boundary_.dtype).device(boundary_.device));
        const Action recv{Op::RecvF, s, mb};
        group_->irecv(input, peer_rank(recv), tag_of(recv, shape_))->wait();
      }
      auto output = stage_.forward(s, input);
      if (s == shape_.stages() - 1) {
        loss_sum += stage_.summed_loss(output, labels.narrow(0, mb * rows, rows)).to(torch::kFloat);
      } else {
        const Action send{Op::SendF, s, mb};
        group_->isend(output.contiguous(), peer_rank(send), tag_of(send, shape_))->wait();
      }
    }
  }
  return loss_sum;
}

torch::Tensor PipelineRuntime::run(const torch::Tensor& inputs, const torch::Tensor& labels,
                                   const torch::Tensor& denominator, bool reduce_grads) {
  const auto start = Clock::now();
  reduce_grads_ = reduce_grads;
  microbatch_rows_ = microbatch_rows(inputs);
  auto loss_sum = torch::zeros({}, torch::TensorOptions(torch::kFloat).device(boundary_.device));
  for (size_t i = 0; i < actions_.size(); ++i) {
    const auto& a = actions_[i];
    switch (a.op) {
      case Op::RecvF:
      case Op::RecvB: post_receive(a); break;
      case Op::F: forward(a, inputs, labels, denominator, loss_sum); break;
      case Op::B: backward(a, last_backwards_.count(i) > 0); break;
      case Op::SendF:
      case Op::SendB: send(a); break;
      case Op::WaitF:
      case Op::WaitB: wait_send(a); break;
    }
  }
  if (!activations_in_.empty() || !gradients_in_.empty() || !saved_.empty() || !input_grads_.empty() ||
      !sends_.empty()) {
    throw std::logic_error(fmt::format("pipeline rank {}: the schedule ended with work left over ({} receives, "
                                       "{} saved forwards, {} unsent gradients, {} unwaited sends)", pp_rank_,
                                       activations_in_.size() + gradients_in_.size(), saved_.size(),
                                       input_grads_.size(), sends_.size()));
  }
  times_.total += seconds_since(start);
  return loss_sum;
}

void PipelineRuntime::forward(const Action& a, const torch::Tensor& inputs, const torch::Tensor& labels,
                              const torch::Tensor& denominator, torch::Tensor& loss_sum) {
  const Key key{a.stage, a.microbatch};
  const int64_t row = a.microbatch * microbatch_rows_;
  // The received activation is a leaf of this stage's graph; its gradient is what goes back.
  auto input = a.stage == 0 ? inputs.narrow(0, row, microbatch_rows_)                   // (b, T) token ids
                            : take_received(activations_in_, a).requires_grad_(true);  // (b, T, dim)
  const auto start = Clock::now();
  auto output = stage_.forward(a.stage, input);
  if (a.stage == shape_.stages() - 1) {
    // Exactly the tensor one process backpropagates for these rows.
    auto loss = stage_.summed_loss(output, labels.narrow(0, row, microbatch_rows_)) / denominator;
    loss_sum += loss.detach();
    output = loss;
  } else if (output.sizes().vec() != boundary_.shape || output.scalar_type() != boundary_.dtype) {
    throw std::logic_error(fmt::format("pipeline stage {} produced {} of {}, but the boundary spec is {} of {}",
                                       a.stage, output.sizes().vec(), c10::toString(output.scalar_type()),
                                       boundary_.shape, c10::toString(boundary_.dtype)));
  }
  saved_[key] = {input, output};
  times_.busy += seconds_since(start);
}

void PipelineRuntime::backward(const Action& a, bool last_of_stage) {
  const Key key{a.stage, a.microbatch};
  auto it = saved_.find(key);
  if (it == saved_.end()) throw std::logic_error("pipeline: backward without its forward: " + text_of(a));
  auto [input, output] = std::move(it->second);
  saved_.erase(it);
  const bool last = a.stage == shape_.stages() - 1;
  auto grad = last ? torch::Tensor() : take_received(gradients_in_, a);  // (b, T, dim) from stage s + 1
  const auto start = Clock::now();
  if (stage_.before_backward) stage_.before_backward(a.stage, last_of_stage, last_of_stage && reduce_grads_);
  if (last) {
    torch::autograd::backward({output});  // the loss
  } else {
    torch::autograd::backward({output}, {grad});
  }
  if (a.stage > 0) input_grads_[key] = input.grad();
  times_.busy += seconds_since(start);
}

void PipelineRuntime::post_receive(const Action& a) {
  auto buffer = torch::empty(boundary_.shape, torch::TensorOptions(boundary_.dtype).device(boundary_.device));
  auto work = group_->irecv(buffer, peer_rank(a), tag_of(a, shape_));
  auto& pending = a.op == Op::RecvF ? activations_in_ : gradients_in_;
  pending[{a.stage, a.microbatch}] = {std::move(buffer), std::move(work)};
}

torch::Tensor PipelineRuntime::take_received(std::map<Key, Pending>& pending, const Action& a) {
  auto it = pending.find({a.stage, a.microbatch});
  if (it == pending.end()) throw std::logic_error("pipeline: no receive was posted for " + text_of(a));
  auto received = std::move(it->second);
  pending.erase(it);
  received.work->wait();
  return received.buffer;
}

void PipelineRuntime::send(const Action& a) {
  const Key key{a.stage, a.microbatch};
  torch::Tensor payload;
  if (a.op == Op::SendF) {
    auto it = saved_.find(key);
    if (it == saved_.end()) throw std::logic_error("pipeline: nothing to send for " + text_of(a));
    payload = it->second.second.detach().contiguous();
  } else {
    auto it = input_grads_.find(key);
    if (it == input_grads_.end()) throw std::logic_error("pipeline: no input gradient to send for " + text_of(a));
    payload = it->second.contiguous();
    input_grads_.erase(it);
  }
  sends_[{a.op == Op::SendF, a.stage, a.microbatch}] = group_->isend(payload, peer_rank(a), tag_of(a, shape_));
}

void PipelineRuntime::wait_send(const Action& a) {
  auto it = sends_.find({a.op == Op::WaitF, a.stage, a.microbatch});
  if (it == sends_.end()) throw std::logic_error("pipeline: no send to wait for " + text_of(a));
  auto work = std::move(it->second);
  sends_.erase(it);
  work->wait();  // drops the sent buffer
}

PipelineTimes PipelineRuntime::take_times() { return std::exchange(times_, {}); }

}  // namespace ctitan::parallel::pipeline
