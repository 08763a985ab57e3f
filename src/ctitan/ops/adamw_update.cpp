#include "ctitan/ops/adamw_update.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

namespace ctitan::ops {

void adamw_update_many(const std::vector<AdamWParam>& params, const AdamWStep& s) {
  torch::NoGradGuard no_grad;
  // (device, dtype) -> the group's tensor lists, in the order the parameters came.
  struct Group {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  };
  std::map<std::pair<std::string, c10::ScalarType>, Group> groups;
  for (const auto& p : params) {
    auto& g = groups[{p.param.device().str(), p.param.scalar_type()}];
    g.params.push_back(p.param);
    g.grads.push_back(p.grad.scalar_type() == p.param.scalar_type() ? p.grad : p.grad.to(p.param.scalar_type()));
    g.exp_avgs.push_back(p.exp_avg);
    g.exp_avg_sqs.push_back(p.exp_avg_sq);
    // The kernel reads each step count (already incremented, as torch.optim does before calling
    // it) from a float tensor on the parameter's device.
    g.steps.push_back(torch::full({}, double(p.step), p.param.options().dtype(torch::kFloat)));
  }
  for (auto& [key, g] : groups) {
    at::_fused_adamw_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, {}, g.steps, s.lr, s.beta1, s.beta2,
                      s.weight_decay, s.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWStep& s) {
  adamw_update_many({{param, grad, exp_avg, exp_avg_sq, s.step}}, s);
}

void adamw_update_reference(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                            torch::Tensor& exp_avg_sq, const AdamWStep& s) {
  torch::NoGradGuard no_grad;
  auto g = grad.to(torch::kFloat);
  param.mul_(1.0 - s.lr * s.weight_decay);
  exp_avg.lerp_(g, 1.0 - s.beta1);
  exp_avg_sq.mul_(s.beta2).addcmul_(g, g, 1.0 - s.beta2);
  double bias_correction1 = 1.0 - std::pow(s.beta1, double(s.step));
  double bias_correction2 = 1.0 - std::pow(s.beta2, double(s.step));
  auto denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(s.eps);
  param.addcdiv_(exp_avg, denom, -s.lr / bias_correction1);
}

}  // namespace ctitan::ops
