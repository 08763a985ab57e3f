#include "ctitan/train/grad_clip.h"

#include <cmath>

#include "ctitan/distributed/communicator.h"
#include "ctitan/ops/sum_of_squares.h"

namespace ctitan::train {

torch::Tensor grad_l2_norm(const std::vector<torch::Tensor>& params, distributed::Communicator* shard_group) {
  std::vector<torch::Tensor> host_grads, device_grads;
  for (const auto& p : params) {
    if (p.grad().defined()) (p.grad().is_cpu() ? host_grads : device_grads).push_back(p.grad());
  }
  // CPU gradients: ctitan's one-pass kernel, whose double is on the host already (no sync).
  auto sum_sq = torch::tensor(ops::sum_of_squares(host_grads), torch::kDouble);
  if (!device_grads.empty()) {
    // GPU gradients: per-tensor norms on the device, never read by the host here.
    auto norms = torch::stack(torch::_foreach_norm(device_grads, 2, torch::kFloat)).to(torch::kDouble);  // (n_params,)
    sum_sq = sum_sq.to(device_grads.front().device()) + norms.pow(2).sum();
  }
  // FSDP: each rank summed only its shards (padding excluded); the group's sum is the whole's.
  if (shard_group) shard_group->all_reduce(sum_sq, distributed::ReduceOp::kSum);
  return sum_sq.sqrt().to(torch::kFloat);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             distributed::Communicator* shard_group) {
  torch::NoGradGuard no_grad;
  auto norm = grad_l2_norm(params, shard_group);
  if (max_norm <= 0) return norm;
  // torch.nn.utils.clip_grad_norm_'s rule as tensor ops, so a GPU step never waits for the norm.
  auto coef = ((norm.to(torch::kDouble) + 1e-6).reciprocal() * max_norm).clamp_max(1.0).to(torch::kFloat);
  // A CPU norm is already on the host: skipping a multiply by 1 (a full pass) costs no sync there.
  if (norm.is_cpu() && coef.item<float>() >= 1.0f) return norm;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (!grads.empty()) torch::_foreach_mul_(grads, coef.to(grads.front().device()));
  return norm;
}

}  // namespace ctitan::train
