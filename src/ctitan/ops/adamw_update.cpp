#include "ctitan/ops/adamw_update.h"

#include <cmath>

namespace ctitan::ops {

void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWStep& s) {
  torch::NoGradGuard no_grad;
  // The kernel reads the step count (already incremented, as torch.optim does before calling it)
  // from a float tensor on the parameter's device.
  auto step = torch::full({}, double(s.step), param.options().dtype(torch::kFloat));
  auto g = grad.scalar_type() == param.scalar_type() ? grad : grad.to(param.scalar_type());
  at::_fused_adamw_({param}, {g}, {exp_avg}, {exp_avg_sq}, {}, {step}, s.lr, s.beta1, s.beta2, s.weight_decay, s.eps,
                    /*amsgrad=*/false, /*maximize=*/false);
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
