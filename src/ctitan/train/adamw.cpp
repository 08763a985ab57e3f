#include "ctitan/train/adamw.h"

#include <cmath>

namespace ctitan::train {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_params, AdamWOptions options)
    : options_(options) {
  for (auto& [name, param] : named_params) {
    states_.push_back({name, param, torch::zeros_like(param, torch::MemoryFormat::Contiguous),
                       torch::zeros_like(param, torch::MemoryFormat::Contiguous), 0});
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  const auto& o = options_;
  for (auto& s : states_) {
    const auto& grad = s.param.grad();
    if (!grad.defined()) continue;
    ++s.step;
    s.param.mul_(1.0 - lr * o.weight_decay);
    s.exp_avg.lerp_(grad, 1.0 - o.beta1);
    s.exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
    double bias_correction1 = 1.0 - std::pow(o.beta1, double(s.step));
    double bias_correction2 = 1.0 - std::pow(o.beta2, double(s.step));
    auto denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps);
    s.param.addcdiv_(s.exp_avg, denom, -lr / bias_correction1);
  }
}

void AdamW::zero_grad() {
  for (auto& s : states_) s.param.mutable_grad() = torch::Tensor();
}

std::vector<torch::Tensor> AdamW::params() const {
  std::vector<torch::Tensor> out;
  for (const auto& s : states_) out.push_back(s.param);
  return out;
}

StateDict AdamW::state_dict() const {
  StateDict out;
  for (const auto& s : states_) {
    out["state." + s.name + ".exp_avg"] = s.exp_avg;
    out["state." + s.name + ".exp_avg_sq"] = s.exp_avg_sq;
    out["state." + s.name + ".step"] = scalar_state(s.step);
  }
  return out;
}

void AdamW::load_state_dict(const StateDict& state) {
  torch::NoGradGuard no_grad;
  for (auto& s : states_) {
    s.exp_avg.copy_(require_state(state, "state." + s.name + ".exp_avg"));
    s.exp_avg_sq.copy_(require_state(state, "state." + s.name + ".exp_avg_sq"));
    s.step = require_state(state, "state." + s.name + ".step").item<int64_t>();
  }
}

}  // namespace ctitan::train
