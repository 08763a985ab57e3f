#include "ctitan/train/grad_clip.h"

#include "ctitan/distributed/communicator.h"

namespace ctitan::train {

torch::Tensor grad_l2_norm(const std::vector<torch::Tensor>& params, distributed::Communicator* shard_group) {
  torch::NoGradGuard no_grad;
  auto sum_sq = torch::zeros({}, torch::kFloat);
  for (const auto& p : params) {
    if (p.grad().defined()) sum_sq = sum_sq.to(p.device()) + p.grad().to(torch::kFloat).pow(2).sum();
  }
  if (shard_group) shard_group->all_reduce(sum_sq, distributed::ReduceOp::kSum);
  return sum_sq.sqrt();
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             distributed::Communicator* shard_group) {
  torch::NoGradGuard no_grad;
  auto norm = grad_l2_norm(params, shard_group);
  if (max_norm <= 0) return norm;
  auto scale = (max_norm / (norm + 1e-6)).clamp_max(1.0);
  for (const auto& p : params) {
    if (p.grad().defined()) p.grad().mul_(scale.to(p.grad().scalar_type()));
  }
  return norm;
}

}  // namespace ctitan::train
