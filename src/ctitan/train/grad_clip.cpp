#include "ctitan/train/grad_clip.h"

#include <cmath>

#include "ctitan/distributed/communicator.h"
#include "ctitan/ops/sum_of_squares.h"

namespace ctitan::train {

torch::Tensor grad_l2_norm(const std::vector<torch::Tensor>& params, distributed::Communicator* shard_group) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  auto sum_sq = torch::tensor(ops::sum_of_squares(grads), torch::kDouble);
  // FSDP: each rank summed only its shards (padding excluded); the group's sum is the whole's.
  if (shard_group) shard_group->all_reduce(sum_sq, distributed::ReduceOp::kSum);
  return sum_sq.sqrt().to(torch::kFloat);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             distributed::Communicator* shard_group) {
  torch::NoGradGuard no_grad;
  auto norm = grad_l2_norm(params, shard_group);
  if (max_norm <= 0) return norm;
  double scale = max_norm / (norm.item<double>() + 1e-6);
  if (scale >= 1.0) return norm;  // clamped to 1: multiplying would be a full pass for nothing
  for (const auto& p : params) {
    if (p.grad().defined()) p.grad().mul_(scale);
  }
  return norm;
}

}  // namespace ctitan::train
