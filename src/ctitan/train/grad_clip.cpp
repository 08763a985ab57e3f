#include "ctitan/train/grad_clip.h"

#include <cmath>

#include "ctitan/ops/sum_of_squares.h"

namespace ctitan::train {

torch::Tensor grad_l2_norm(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  return torch::tensor(float(std::sqrt(ops::sum_of_squares(grads))));
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  auto norm = grad_l2_norm(params);
  if (max_norm <= 0) return norm;
  double scale = max_norm / (norm.item<double>() + 1e-6);
  if (scale >= 1.0) return norm;  // clamped to 1: multiplying would be a full pass for nothing
  for (const auto& p : params) {
    if (p.grad().defined()) p.grad().mul_(scale);
  }
  return norm;
}

}  // namespace ctitan::train
