#include "ctitan/parallel/moe_balance.h"

#include <fmt/format.h>

namespace ctitan::parallel {

ExpertBalance::ExpertBalance(const std::vector<models::TransformerImpl*>& parts,
                             std::vector<std::shared_ptr<distributed::Communicator>> groups) {
  for (auto* part : parts) {
    for (auto* block : part->blocks()) {
      if (block->moe) layers_.push_back({block->layer_id, block->moe.ptr().get()});
    }
  }
  for (auto& g : groups) {
    if (g && g->size() > 1) groups_.push_back(std::move(g));
  }
}

void ExpertBalance::update() {
  if (layers_.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> counts;
  for (const auto& layer : layers_) {
    auto& moe = *layer.moe;
    const auto device = moe.router->gate->weight.device();
    // A layer that routed nothing this step (no forward with grad) counts zeros.
    counts.push_back(moe.tokens_per_expert.defined() ? moe.tokens_per_expert.clone()
                                                     : torch::zeros({moe.args().num_experts}, torch::TensorOptions(torch::kFloat).device(device)));
    if (moe.tokens_per_expert.defined()) moe.tokens_per_expert.zero_();
  }
  auto all = torch::stack(counts);  // (L, E): one collective for every layer
  for (const auto& g : groups_) g->all_reduce(all, distributed::ReduceOp::kSum);
  if (layers_.front().moe->aux_loss_weight > 0) {  // the same on every rank: one more collective each
    auto aux = torch::zeros({}, all.options());
    for (const auto& layer : layers_) {
      auto& sum = layer.moe->aux_loss_sum;
      if (sum.defined()) aux += sum.to(aux.device());
      sum = torch::Tensor();
    }
    for (const auto& g : groups_) g->all_reduce(aux, distributed::ReduceOp::kSum);
    last_aux_loss_ = aux;
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto& moe = *layers_[i].moe;
    if (!moe.expert_bias.defined()) continue;
    auto n = all[int64_t(i)];  // (E)
    auto delta = moe.args().load_balance_coeff * torch::sign(n.mean() - n);
    moe.expert_bias.add_(delta - delta.mean());
  }
  last_counts_ = all;
}

std::vector<std::pair<std::string, double>> ExpertBalance::load_metrics() const {
  std::vector<std::pair<std::string, double>> out;
  if (!last_counts_.defined()) return out;
  // The balance loss the last step added to the training loss, all layers (tp == cp == 1).
  if (last_aux_loss_.defined()) out.emplace_back("moe/aux_loss", last_aux_loss_.item<double>());
  // (L, E) -> per layer: loads relative to the mean (1 = every expert equally loaded).
  auto counts = last_counts_.to(torch::kCPU, torch::kDouble);
  auto mean = counts.mean(1, /*keepdim=*/true).clamp_min(1e-12);
  auto relative = counts / mean;
  auto cv = counts.std(1, /*unbiased=*/false) / mean.squeeze(1);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto prefix = fmt::format("moe/layer_{}/", layers_[i].layer_id);
    const auto row = relative[int64_t(i)];
    out.emplace_back(prefix + "load_min", row.min().item<double>());
    out.emplace_back(prefix + "load_max", row.max().item<double>());
    out.emplace_back(prefix + "load_cv", cv[int64_t(i)].item<double>());
    out.emplace_back(prefix + "routed", counts[int64_t(i)].sum().item<double>());
    if (const auto& bias = layers_[i].moe->expert_bias; bias.defined()) {
      auto host = bias.to(torch::kCPU);
      out.emplace_back(prefix + "bias_min", host.min().item<double>());
      out.emplace_back(prefix + "bias_max", host.max().item<double>());
    }
  }
  return out;
}

}  // namespace ctitan::parallel
