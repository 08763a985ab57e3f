#include "ctitan/components/grad_clip.h"

#include <cmath>

#include "ctitan/distributed/communicator.h"
#include "ctitan/ops/sum_of_squares.h"

namespace ctitan::components {

namespace {

// Sum of squares of `grads` as a 0-d fp64 tensor (on the host for CPU gradients).
torch::Tensor sum_of_squares(const std::vector<torch::Tensor>& grads) {
  std::vector<torch::Tensor> host_grads, device_grads;
  for (const auto& g : grads) (g.is_cpu() ? host_grads : device_grads).push_back(g);
  // CPU gradients: ctitan's one-pass kernel, whose double is on the host already (no sync).
  auto sum_sq = torch::tensor(ops::sum_of_squares(host_grads), torch::kDouble);
  if (!device_grads.empty()) {
    // GPU gradients: per-tensor norms on the device, never read by the host here.
    auto norms = torch::stack(torch::_foreach_norm(device_grads, 2, torch::kFloat)).to(torch::kDouble);  // (n_params,)
    sum_sq = sum_sq.to(device_grads.front().device()) + norms.pow(2).sum();
  }
  return sum_sq;
}

}  // namespace

torch::Tensor grad_l2_norm(const std::vector<torch::Tensor>& params, const GradNormGroups& groups) {
  std::vector<torch::Tensor> sliced, replicated;  // over the tp group
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    bool whole_on_tp = groups.tp && i < groups.tp_replicated.size() && groups.tp_replicated[i];
    (whole_on_tp ? replicated : sliced).push_back(params[i].grad());
  }
  auto sum_sq = sum_of_squares(sliced);
  // FSDP: each rank summed only its shards (padding excluded); the group's sum is the whole's.
  if (groups.shard) groups.shard->all_reduce(sum_sq, distributed::ReduceOp::kSum);
  if (groups.tp) {
    // TP: the slices add up over the tp group; the replicated norms are counted once.
    groups.tp->all_reduce(sum_sq, distributed::ReduceOp::kSum);
    auto replicated_sq = sum_of_squares(replicated);
    if (groups.shard) groups.shard->all_reduce(replicated_sq, distributed::ReduceOp::kSum);
    sum_sq = sum_sq + replicated_sq.to(sum_sq.device());
  }
  if (groups.pp) groups.pp->all_reduce(sum_sq, distributed::ReduceOp::kSum);
  return sum_sq.sqrt().to(torch::kFloat);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             const GradNormGroups& groups) {
  torch::NoGradGuard no_grad;
  auto norm = grad_l2_norm(params, groups);
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

}  // namespace ctitan::components
