#include "ctitan/ps/gradient_round.h"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

#include "ctitan/ps/ps_config.h"

namespace ctitan::ps {

GradientRound::GradientRound(int trainers, int64_t first_step, std::string what)
    : what_(std::move(what)), step_(first_step), slots_(size_t(trainers)) {}

int64_t GradientRound::step() const {
  std::lock_guard lock(mutex_);
  return step_;
}

rpc::Future GradientRound::add(Push push) {
  std::lock_guard lock(mutex_);
  const std::string who = trainer_name(push.rank);
  if (push.rank < 1 || size_t(push.rank) > slots_.size()) {
    throw std::runtime_error(fmt::format("ps: a push from rank {}, which is not a trainer (1..{})", push.rank,
                                         slots_.size()));
  }
  if (!failure_.empty()) throw std::runtime_error(failure_);
  if (push.step != step_) {
    throw std::runtime_error(fmt::format("ps: {} pushed its gradient for step {}, the server is at step {}", who,
                                         push.step, step_));
  }
  auto& slot = slots_[size_t(push.rank - 1)];
  if (slot) throw std::runtime_error(fmt::format("ps: {} pushed twice for step {}", who, push.step));
  slot = std::move(push);
  if (++filled_ == int(slots_.size())) full_.notify_one();
  return shared_;
}

std::string GradientRound::missing_locked() const {
  std::string names;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i]) continue;
    names += fmt::format("{}{} (rank {})", names.empty() ? "" : ", ", trainer_name(int(i + 1)), i + 1);
  }
  return names;
}

std::vector<Push> GradientRound::wait_full(double timeout_s) {
  std::unique_lock lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  const bool ready = full_.wait_until(lock, deadline, [&] { return filled_ == int(slots_.size()) || !failure_.empty(); });
  if (!failure_.empty()) throw std::runtime_error(failure_);
  if (!ready) {
    throw std::runtime_error(fmt::format("ps: step {}: no {} from {} after {:g} s (ps.round_timeout_seconds; {} of {} "
                                         "trainers' arrived)", step_, what_, missing_locked(), timeout_s, filled_,
                                         slots_.size()));
  }
  std::vector<Push> pushes;
  pushes.reserve(slots_.size());
  for (auto& slot : slots_) pushes.push_back(std::move(*slot));
  return pushes;
}

void GradientRound::finish(const torch::Tensor& params) {
  rpc::Future done;
  {
    std::lock_guard lock(mutex_);
    done = shared_;
    shared_ = rpc::Future();
    for (auto& slot : slots_) slot.reset();
    filled_ = 0;
    ++step_;
  }
  done.set_value(params);
}

void GradientRound::fail(const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) return;
    failure_ = message;
  }
  full_.notify_one();
}

}  // namespace ctitan::ps
