#include "ctitan/models/common/moe.h"

#include <limits>

#include "ctitan/models/common/deferred_init.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/ops/grouped_matmul.h"
#include "ctitan/ops/swiglu.h"

namespace ctitan::models {
namespace {

// Sets the scores of every expert outside each token's best num_limited_groups groups to -inf, so
// top-k cannot pick them. A group's score is the sum of its two best members (DeepSeek-V3).
// choice: (N, E) fp32 -> (N, E)
torch::Tensor limit_to_best_groups(const torch::Tensor& choice, const MoeArgs& args) {
  const int64_t n = choice.size(0), groups = args.num_expert_groups;
  auto grouped = choice.view({n, groups, -1});                                        // (N, G, E/G)
  auto group_scores = std::get<0>(grouped.topk(std::min<int64_t>(2, grouped.size(2)), -1)).sum(-1);  // (N, G)
  auto best = std::get<1>(group_scores.topk(args.num_limited_groups, -1));           // (N, limited)
  auto outside = torch::ones({n, groups}, choice.options().dtype(torch::kBool)).scatter_(1, best, false);
  return grouped.masked_fill(outside.unsqueeze(-1), -std::numeric_limits<float>::infinity()).view({n, -1});
}

}  // namespace

RouterImpl::RouterImpl(int64_t dim, const MoeArgs& args) : args_(args) {
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(dim, args.num_experts).bias(false)));
  release_if_deferred(*gate);
}

Routing RouterImpl::forward(const torch::Tensor& x, const torch::Tensor& bias) {
  // Scores in fp32 whatever the compute dtype: a bf16 softmax over 128 experts would tie many.
  auto logits = gate(x).to(torch::kFloat);  // (N, E)
  auto scores = args_.score_func == RouterScore::kSigmoid ? logits.sigmoid() : logits.softmax(-1);
  torch::Tensor experts;
  {
    torch::NoGradGuard no_grad;  // the choice is not differentiable; the weights below are
    auto choice = bias.defined() ? scores + bias : scores.detach();
    if (args_.num_expert_groups > 0 && args_.num_limited_groups > 0) choice = limit_to_best_groups(choice, args_);
    experts = std::get<1>(choice.topk(args_.top_k, -1));  // (N, k), best first
  }
  auto weights = scores.gather(1, experts);  // (N, k), unbiased
  if (args_.route_norm) weights = weights / (weights.sum(-1, /*keepdim=*/true) + 1e-20);
  if (args_.route_scale != 1.0) weights = weights * args_.route_scale;
  return {experts, weights};
}

GroupedExpertsImpl::GroupedExpertsImpl(int64_t dim, const MoeArgs& args) {
  const int64_t e = args.num_experts, hidden = args.hidden_dim;
  w1 = register_parameter("w1", torch::empty({e, hidden, dim}));
  w2 = register_parameter("w2", torch::empty({e, dim, hidden}));
  w3 = register_parameter("w3", torch::empty({e, hidden, dim}));
  release_if_deferred(*this);
}

torch::Tensor GroupedExpertsImpl::forward(const torch::Tensor& x, const std::vector<int64_t>& counts) {
  // w1 before w3, written out, as FeedForward's (op selective AC counts matmuls in call order).
  auto gate = ops::grouped_matmul(x, w1, counts);  // (N, hidden)
  auto up = ops::grouped_matmul(x, w3, counts);
  return ops::grouped_matmul(ops::swiglu(gate, up), w2, counts);  // (N, dim)
}

MoEImpl::MoEImpl(const ModelArgs& args) : args_(args.moe) {
  router = register_module("router", Router(args.dim, args_));
  experts = register_module("experts", GroupedExperts(args.dim, args_));
  if (args_.num_shared_experts > 0) {
    shared_experts = register_module(
        "shared_experts", std::make_shared<FeedForwardImpl>(args.dim, args_.hidden_dim * args_.num_shared_experts));
  }
  if (args_.load_balance_coeff > 0) expert_bias = register_buffer("expert_bias", torch::zeros({args_.num_experts}));
}

torch::Tensor MoEImpl::forward(const torch::Tensor& x) {
  const auto shape = x.sizes().vec();
  const int64_t dim = shape.back(), k = args_.top_k;
  auto flat = x.reshape({-1, dim});  // (N, dim)
  const int64_t n = flat.size(0);
  auto routing = router(flat, expert_bias);
  auto chosen = routing.experts.reshape({-1});  // (N k): token i's j-th expert at i k + j
  auto counts = torch::bincount(chosen, {}, args_.num_experts);  // (E) int64
  if (torch::GradMode::is_enabled()) {
    torch::NoGradGuard no_grad;
    if (!tokens_per_expert.defined() || tokens_per_expert.device() != x.device()) {
      tokens_per_expert = torch::zeros({args_.num_experts}, torch::TensorOptions(torch::kFloat).device(x.device()));
    }
    tokens_per_expert.add_(counts);
  }
  // A stable sort keeps each expert's tokens in token order, so results do not depend on the sort.
  auto order = std::get<1>(chosen.sort(std::optional<bool>(true), /*dim=*/0, /*descending=*/false));  // (N k): sorted slot -> routed slot
  auto routed = flat.index_select(0, order.div(k, "floor"));  // (N k, dim), grouped by expert
  // The experts this rank holds, on rows sorted by them: through the hooks, where FSDP gathers them.
  const ModuleHooks::LocalExperts local = [this](const torch::Tensor& rows, const std::vector<int64_t>& sizes) {
    auto run = [&](const torch::Tensor& in) { return experts->forward(in, sizes); };
    return hooks ? hooks->call(*experts, rows, run) : run(rows);
  };
  torch::Tensor out;  // (N k, dim)
  if (hooks && hooks->experts()) {
    out = hooks->experts()(routed, counts, local);  // expert parallelism: elsewhere and back
  } else {
    // The group sizes on the host: the per-expert matmuls need them (on CUDA a copy that waits
    // for the router; torchtitan's grouped_mm path waits likewise under expert parallelism).
    auto host_counts = counts.cpu();
    out = local(routed, std::vector<int64_t>(host_counts.data_ptr<int64_t>(),
                                             host_counts.data_ptr<int64_t>() + host_counts.numel()));
  }
  // Back to token-major (row i k + j is token i's j-th expert), then the score-weighted sum in
  // fp32, scores after the experts (score_before_experts false, every Qwen3 and DeepSeek flavor).
  auto inverse = torch::empty_like(order).scatter_(0, order, torch::arange(n * k, order.options()));
  auto per_choice = out.index_select(0, inverse).view({n, k, dim}).to(torch::kFloat);
  auto y = (per_choice * routing.weights.unsqueeze(-1)).sum(1).to(x.scalar_type());  // (N, dim)
  if (shared_experts) y = y + shared_experts->forward(flat);
  return y.view(shape);
}

}  // namespace ctitan::models
