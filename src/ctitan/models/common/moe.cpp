#include "ctitan/models/common/moe.h"

#include <cmath>
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

// Identity on the MoE output in forward; in backward it also starts the balance loss's backward,
// with gradient 1: the loss is already weighted as its share of the training loss. As
// Megatron's MoEAuxLossAutoScaler: the loss joins the graph without a second backward call.
class AddBalanceLoss : public torch::autograd::Function<AddBalanceLoss> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y, const torch::Tensor& loss) {
    ctx->saved_data["loss_options"] = loss.scalar_type();
    return y.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    return {grads[0], torch::ones({}, grads[0].options().dtype(ctx->saved_data["loss_options"].toScalarType()))};
  }
};

// DeepSeek-V3's sequence-wise balance loss summed over the batch's sequences: per sequence,
// sum_e f_e P_e with f_e = E / (k T) x (choices of e) and P_e = the mean over its T tokens of the
// scores normalised to sum 1. scores (B T, E) fp32, chosen (B T, k) -> 0-d fp32.
torch::Tensor sequence_balance_loss(const torch::Tensor& scores, const torch::Tensor& chosen, int64_t batch,
                                    int64_t top_k) {
  const int64_t e = scores.size(1), t = scores.size(0) / batch;
  auto normalised = scores / (scores.sum(-1, /*keepdim=*/true) + 1e-20);
  auto mean_score = normalised.view({batch, t, e}).mean(1);  // (B, E)
  auto picks = torch::zeros({batch, e}, scores.options()).scatter_add_(
      1, chosen.view({batch, t * top_k}), torch::ones({batch, t * top_k}, scores.options()));  // (B, E)
  auto share = picks * (double(e) / double(top_k * t));
  return (share * mean_score).sum();
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
  return {experts, weights, scores};
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
  // Capacity: each expert keeps its first `capacity` rows in token order; the rest are dropped.
  torch::Tensor kept;  // sorted positions kept, (R) int64; undefined: all N k
  if (args_.capacity_factor > 0) {
    const auto capacity = int64_t(std::ceil(args_.capacity_factor * double(n * k) / double(args_.num_experts)));
    auto sorted_experts = chosen.index_select(0, order);                    // (N k), ascending
    auto group_start = (counts.cumsum(0) - counts).index_select(0, sorted_experts);
    auto position = torch::arange(n * k, order.options()) - group_start;  // the row's place in its expert's group
    kept = (position < capacity).nonzero().squeeze(1);
    order = order.index_select(0, kept);
    counts = counts.clamp_max(capacity);
  }
  auto routed = flat.index_select(0, order.div(k, "floor"));  // (R, dim), grouped by expert
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
  // Dropped choices (capacity) come back as zero rows.
  torch::Tensor per_choice;
  if (kept.defined()) {
    per_choice = torch::zeros({n * k, dim}, out.options()).index_copy(0, order, out);
  } else {
    auto inverse = torch::empty_like(order).scatter_(0, order, torch::arange(n * k, order.options()));
    per_choice = out.index_select(0, inverse);
  }
  per_choice = per_choice.view({n, k, dim}).to(torch::kFloat);
  auto y = (per_choice * routing.weights.unsqueeze(-1)).sum(1).to(x.scalar_type());  // (N, dim)
  if (shared_experts) y = y + shared_experts->forward(flat);
  if (aux_loss_weight > 0 && torch::GradMode::is_enabled() && x.dim() == 3) {
    auto loss = aux_loss_weight * sequence_balance_loss(routing.scores, routing.experts, x.size(0), k);
    {
      torch::NoGradGuard no_grad;
      aux_loss_sum = aux_loss_sum.defined() ? aux_loss_sum + loss.detach() : loss.detach().clone();
    }
    y = AddBalanceLoss::apply(y, loss);
  }
  return y.view(shape);
}

}  // namespace ctitan::models
