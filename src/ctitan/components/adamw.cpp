#include "ctitan/components/adamw.h"

#include <cmath>

#include "ctitan/ops/adamw_update.h"
#include "ctitan/ops/fusion_switch.h"

namespace ctitan::components {

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
  static const bool fused = ops::fused_enabled("adamw");
  std::vector<ops::AdamWParam> updates;
  for (auto& s : states_) {
    const auto& grad = s.param.grad();
    if (!grad.defined()) continue;
    ++s.step;
    updates.push_back({s.param, grad, s.exp_avg, s.exp_avg_sq, s.step});
  }
  ops::AdamWStep hyper{lr, o.beta1, o.beta2, o.eps, o.weight_decay, 0};
  if (fused) return ops::adamw_update_many(updates, hyper);
  for (auto& u : updates) {
    hyper.step = u.step;
    ops::adamw_update_reference(u.param, u.grad, u.exp_avg, u.exp_avg_sq, hyper);
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

ShardLayouts AdamW::state_layouts(const ShardLayouts& param_layouts) const {
  ShardLayouts out;
  for (const auto& [fqn, layout] : param_layouts) {
    out["state." + fqn + ".exp_avg"] = layout;
    out["state." + fqn + ".exp_avg_sq"] = layout;
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

}  // namespace ctitan::components
