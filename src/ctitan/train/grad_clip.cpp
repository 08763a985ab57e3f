#include "ctitan/train/grad_clip.h"

namespace ctitan::train {

torch::Tensor grad_l2_norm(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  auto sum_sq = torch::zeros({}, torch::kFloat);
  for (const auto& p : params) {
    if (p.grad().defined()) sum_sq = sum_sq.to(p.device()) + p.grad().to(torch::kFloat).pow(2).sum();
  }
  return sum_sq.sqrt();
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  auto norm = grad_l2_norm(params);
  if (max_norm <= 0) return norm;
  auto scale = (max_norm / (norm + 1e-6)).clamp_max(1.0);
  for (const auto& p : params) {
    if (p.grad().defined()) p.grad().mul_(scale.to(p.grad().scalar_type()));
  }
  return norm;
}

}  // namespace ctitan::train
