#include "ctitan/ops/adamw_update.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "ctitan/ops/scalar_math.h"

namespace ctitan::ops {
namespace {

template <typename G>
void update(float* p, const G* g, float* m, float* v, int64_t n, const AdamWStep& s) {
  const float decay = float(1.0 - s.lr * s.weight_decay), b1 = float(1.0 - s.beta1), beta2 = float(s.beta2),
              b2 = float(1.0 - s.beta2), eps = float(s.eps);
  const float inv_sqrt_bc2 = float(1.0 / std::sqrt(1.0 - std::pow(s.beta2, double(s.step))));
  const float step_size = float(-s.lr / (1.0 - std::pow(s.beta1, double(s.step))));
  at::parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float gi = to_float(g[i]);
      float mi = m[i] + b1 * (gi - m[i]);  // lerp towards the gradient
      float vi = v[i] * beta2 + b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay + step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    }
  });
}

}  // namespace

void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWStep& s) {
  TORCH_CHECK(param.scalar_type() == torch::kFloat && exp_avg.scalar_type() == torch::kFloat &&
                  exp_avg_sq.scalar_type() == torch::kFloat && param.is_contiguous() && exp_avg.is_contiguous() &&
                  exp_avg_sq.is_contiguous() && grad.numel() == param.numel(),
              "adamw_update: needs contiguous fp32 param and moments of the gradient's size");
  auto g = grad.contiguous();
  auto* p = param.data_ptr<float>();
  auto *m = exp_avg.data_ptr<float>(), *v = exp_avg_sq.data_ptr<float>();
  if (g.scalar_type() == torch::kBFloat16) update(p, g.data_ptr<c10::BFloat16>(), m, v, param.numel(), s);
  else update(p, g.to(torch::kFloat).data_ptr<float>(), m, v, param.numel(), s);
}

void adamw_update_upstream(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                           torch::Tensor& exp_avg_sq, const AdamWStep& s) {
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
