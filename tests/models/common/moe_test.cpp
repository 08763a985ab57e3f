// The MoE layer against a direct per-token reference written here (each token's chosen experts,
// each a SwiGLU of its own rows of w1/w2/w3, weighted by the renormalised router scores, plus
// the shared experts) in fp64, forward and gradients; the router's rules (the selection bias
// chooses but does not weigh, group-limited routing); the grouped matmul's per-expert path
// against at::_grouped_mm; token counting once per token under activation checkpointing; and the
// load-balancing update across simulated ranks.
#include <gtest/gtest.h>

#include "ctitan/distributed/communicator.h"
#include "ctitan/models/common/flops.h"
#include "ctitan/models/common/moe.h"
#include "ctitan/models/common/parameter_shapes.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/ops/grouped_matmul.h"
#include "ctitan/parallel/activation_checkpoint.h"
#include "ctitan/parallel/moe_balance.h"
#include "support/thread_ranks.h"

namespace ctitan::moe_layer_test {
namespace {

using models::ModelArgs;
using models::MoE;

ModelArgs moe_args(int64_t experts = 8, int64_t top_k = 2, int64_t shared = 0) {
  ModelArgs a;
  a.dim = 16;
  a.n_layers = 1;
  a.n_heads = 2;
  a.vocab_size = 32;
  a.moe.num_experts = experts;
  a.moe.top_k = top_k;
  a.moe.hidden_dim = 12;
  a.moe.num_shared_experts = shared;
  a.moe.route_norm = true;
  return a;
}

void randomize(torch::nn::Module& m, double std = 0.3) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.normal_(0.0, std);
}

torch::Tensor swiglu_ref(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2,
                         const torch::Tensor& w3) {
  return torch::matmul(torch::silu(torch::matmul(x, w1.t())) * torch::matmul(x, w3.t()), w2.t());
}

// Token by token: softmax over every expert, the top_k by score (bias added for the choice),
// weights renormalised over the chosen, each expert's SwiGLU weighted and summed; + shared.
torch::Tensor reference_moe(const torch::Tensor& x, models::MoEImpl& moe) {
  const auto& a = moe.args();
  auto flat = x.reshape({-1, x.size(-1)});
  auto scores = torch::matmul(flat, moe.router->gate->weight.t()).softmax(-1);
  auto choice = moe.expert_bias.defined() ? scores + moe.expert_bias.to(scores.dtype()) : scores;
  std::vector<torch::Tensor> rows;
  for (int64_t i = 0; i < flat.size(0); ++i) {
    auto ids = std::get<1>(choice[i].detach().topk(a.top_k));
    auto w = scores[i].index_select(0, ids);
    if (a.route_norm) w = w / w.sum();
    auto y = torch::zeros_like(flat[i]);
    for (int64_t j = 0; j < a.top_k; ++j) {
      int64_t e = ids[j].item<int64_t>();
      y = y + w[j] * swiglu_ref(flat[i], moe.experts->w1[e], moe.experts->w2[e], moe.experts->w3[e]);
    }
    if (moe.shared_experts) {
      y = y + swiglu_ref(flat[i], moe.shared_experts->w1->weight, moe.shared_experts->w2->weight,
                         moe.shared_experts->w3->weight);
    }
    rows.push_back(y);
  }
  return torch::stack(rows).view(x.sizes());
}

// The layer in fp32 against the reference in fp64 on the same weights: they differ by fp32
// rounding in sums of <= 16 terms, ~1e-6 relative; 1e-5 leaves margin, and a wrong expert row, a
// missing renormalisation or a weight applied to the wrong token is off by O(1).
TEST(MoeLayer, EqualsPerTokenReferenceForwardAndBackward) {
  for (int64_t shared : {0, 1}) {
    torch::manual_seed(3);
    MoE moe(moe_args(8, 2, shared));
    randomize(*moe);
    {
      torch::NoGradGuard no_grad;
      moe->expert_bias.normal_(0.0, 0.05);  // a bias that changes some choices
    }
    MoE ref_moe(moe_args(8, 2, shared));
    {
      torch::NoGradGuard no_grad;
      ref_moe->to(torch::kDouble);
      auto src = moe->named_parameters();
      for (auto& p : ref_moe->named_parameters()) p.value().copy_(src[p.key()]);
      ref_moe->expert_bias.copy_(moe->expert_bias);
    }
    auto x = torch::randn({2, 7, 16}).requires_grad_(true);
    auto y = moe(x);
    auto g = torch::randn_like(y);
    auto grads = torch::autograd::grad({y}, {x, moe->experts->w1, moe->experts->w2, moe->router->gate->weight}, {g});
    auto x64 = x.detach().to(torch::kDouble).requires_grad_(true);
    auto ref = reference_moe(x64, *ref_moe);
    auto ref_grads = torch::autograd::grad(
        {ref}, {x64, ref_moe->experts->w1, ref_moe->experts->w2, ref_moe->router->gate->weight}, {g.to(torch::kDouble)});
    const auto relative = [](const torch::Tensor& a, const torch::Tensor& b) {
      return (a.to(torch::kDouble) - b).abs().max().item<double>() / b.abs().max().item<double>();
    };
    EXPECT_LT(relative(y, ref), 1e-5) << "shared " << shared;
    for (size_t i = 0; i < grads.size(); ++i) EXPECT_LT(relative(grads[i], ref_grads[i]), 1e-5) << "gradient " << i << " shared " << shared;
  }
}

// Capacity: each expert keeps its first C choices in token order (C = ceil(cf N k / E)); the rest
// add nothing. Against a token-by-token reference that drops by the same rule (fp64 vs the
// layer's fp32: 1e-5, as above).
TEST(MoeLayer, CapacityDropsTheChoicesBeyondEachExpertsShareInTokenOrder) {
  torch::manual_seed(9);
  auto args = moe_args(4, 2);
  args.moe.capacity_factor = 0.5;  // N k = 28 choices over 4 experts: capacity ceil(3.5) = 4 each
  args.moe.load_balance_coeff = 0;
  MoE moe(args);
  randomize(*moe);
  auto x = torch::randn({2, 7, 16});
  auto y = moe(x);
  auto flat = x.reshape({-1, 16}).to(torch::kDouble);
  auto scores = torch::matmul(flat, moe->router->gate->weight.to(torch::kDouble).t()).softmax(-1);
  std::vector<int64_t> kept(4, 0);
  int64_t dropped = 0;
  std::vector<torch::Tensor> rows;
  for (int64_t i = 0; i < flat.size(0); ++i) {
    auto ids = std::get<1>(scores[i].topk(2));
    auto w = scores[i].index_select(0, ids);
    w = w / w.sum();
    auto out = torch::zeros({16}, torch::kDouble);
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t e = ids[j].item<int64_t>();
      if (kept[size_t(e)]++ >= 4) {
        ++dropped;
        continue;
      }
      out += w[j] * swiglu_ref(flat[i], moe->experts->w1[e].to(torch::kDouble), moe->experts->w2[e].to(torch::kDouble),
                               moe->experts->w3[e].to(torch::kDouble));
    }
    rows.push_back(out);
  }
  ASSERT_GT(dropped, 0) << "the inputs must overflow some expert for the test to test anything";
  auto ref = torch::stack(rows).view({2, 7, 16});
  EXPECT_LT((y.to(torch::kDouble) - ref).abs().max().item<double>(), 1e-5 * ref.abs().max().item<double>());
}

// The sequence-wise balance loss: its value (per sequence sum_e f_e P_e, f_e = E / (k T) x the
// sequence's choices of e, P_e its mean normalised score) written out here, and the router's
// gradient equals autograd's of output + weighted loss (1e-5: fp32 sums of <= 16 terms).
TEST(MoeLayer, BalanceLossAddsItsGradientAndItsValue) {
  torch::manual_seed(10);
  auto args = moe_args(4, 2);
  args.moe.load_balance_coeff = 0;
  MoE moe(args);
  randomize(*moe);
  const auto& gate = moe->router->gate->weight;
  auto x = torch::randn({3, 5, 16});
  auto g = torch::randn({3, 5, 16});
  moe->aux_loss_weight = 0.25;
  auto with_loss = torch::autograd::grad({moe(x)}, {gate}, {g})[0];  // d/dgate of y.g + 0.25 L
  const double value = moe->aux_loss_sum.item<double>();
  moe->aux_loss_weight = 0;
  auto y = moe(x);
  // L written out: per sequence b, sum_e (E / (k T)) x picks_e x mean_t normalised score_e.
  auto scores = torch::matmul(x.reshape({-1, 16}), gate.t()).softmax(-1);  // (15, 4), with grad
  auto chosen = std::get<1>(scores.detach().topk(2, -1));
  auto loss = torch::zeros({});
  for (int64_t b = 0; b < 3; ++b) {
    auto seq = scores.slice(0, b * 5, b * 5 + 5);
    auto p = (seq / seq.sum(-1, true)).mean(0);  // (4)
    std::vector<double> picks(4, 0);
    for (int64_t t = 0; t < 5; ++t) {
      for (int64_t j = 0; j < 2; ++j) picks[size_t(chosen[b * 5 + t][j].item<int64_t>())] += 1;
    }
    for (int64_t e = 0; e < 4; ++e) loss = loss + (4.0 / (2 * 5)) * picks[size_t(e)] * p[e];
  }
  EXPECT_NEAR(value, 0.25 * loss.item<double>(), 1e-6);
  auto reference = torch::autograd::grad({(y * g).sum() + 0.25 * loss}, {gate})[0];
  EXPECT_TRUE(torch::allclose(with_loss, reference, 1e-5, 1e-6)) << (with_loss - reference).abs().max();
  // The loss moves the gradient (else the comparison proves nothing).
  auto without = torch::autograd::grad({(moe(x) * g).sum()}, {gate})[0];
  EXPECT_GT((with_loss - without).abs().max().item<double>(), 1e-4);
}

// Every token's weights are the unbiased scores: a bias that makes expert 0 win everywhere
// changes the choice, and the weight of expert 0 is still its softmax score.
TEST(MoeLayer, BiasChoosesButDoesNotWeigh) {
  torch::manual_seed(1);
  auto args = moe_args(4, 1).moe;
  args.route_norm = false;
  models::Router router(16, args);
  randomize(*router);
  auto x = torch::randn({10, 16});
  auto bias = torch::tensor({10.0f, 0.0f, 0.0f, 0.0f});
  auto routing = router(x, bias);
  EXPECT_TRUE((routing.experts == 0).all().item<bool>());
  auto scores = torch::matmul(x, router->gate->weight.t()).softmax(-1);
  EXPECT_TRUE(torch::allclose(routing.weights.squeeze(1), scores.select(1, 0)));
  // Without the bias the choice is the argmax.
  auto plain = router(x, torch::Tensor());
  EXPECT_TRUE(torch::equal(plain.experts.squeeze(1), scores.argmax(-1)));
}

// Group-limited routing: 8 experts in 4 groups of 2, each token limited to its best group (by the
// sum of the group's two scores): both chosen experts lie in that group.
TEST(MoeLayer, GroupLimitedRoutingStaysInTheBestGroups) {
  torch::manual_seed(2);
  auto args = moe_args(8, 2).moe;
  args.score_func = models::RouterScore::kSigmoid;
  args.num_expert_groups = 4;
  args.num_limited_groups = 1;
  models::Router router(16, args);
  randomize(*router);
  auto x = torch::randn({50, 16});
  auto routing = router(x, torch::Tensor());
  auto scores = torch::matmul(x, router->gate->weight.t()).sigmoid();  // (50, 8)
  auto best_group = scores.view({50, 4, 2}).sum(-1).argmax(-1);     // two members: the sum is the top-2 sum
  EXPECT_TRUE(torch::equal(routing.experts.div(2, "floor"), best_group.unsqueeze(1).expand({50, 2})));
  // Renormalised weights sum to 1 per token.
  EXPECT_TRUE(torch::allclose(routing.weights.sum(-1), torch::ones({50})));
}

// The per-expert path and at::_grouped_mm agree, forward and backward, with experts that get no
// rows (first, middle, last). fp32: both are one GEMM per group over the same rows, so they differ
// by the BLAS kernels' blocking only: 1e-5 relative.
TEST(MoeLayer, GroupedMatmulPerExpertEqualsGroupedMm) {
  torch::manual_seed(4);
  std::vector<int64_t> counts{0, 5, 0, 9, 3, 0};
  auto x = torch::randn({17, 8}).requires_grad_(true);
  auto w = torch::randn({6, 4, 8}).requires_grad_(true);
  auto a = ops::grouped_matmul(x, w, counts);
  auto b = ops::grouped_matmul_fused(x, w, counts);
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-5));
  auto g = torch::randn({17, 4});
  auto ga = torch::autograd::grad({a}, {x, w}, {g});
  auto gb = torch::autograd::grad({b}, {x, w}, {g});
  EXPECT_TRUE(torch::allclose(ga[0], gb[0], 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(ga[1], gb[1], 1e-5, 1e-5));
  EXPECT_EQ(ga[1][0].abs().sum().item<float>(), 0.0f);  // an expert without rows gets a zero gradient
}

// Counted once per token per step: with grad, not in evaluation, and once under a checkpointed
// block (whose first run has no grad and whose recomputation has).
TEST(MoeLayer, CountsEachTokenOnceUnderActivationCheckpointing) {
  torch::manual_seed(5);
  MoE moe(moe_args(8, 2));
  randomize(*moe);
  auto x = torch::randn({3, 5, 16});
  {
    torch::NoGradGuard no_grad;
    moe(x);
  }
  EXPECT_FALSE(moe->tokens_per_expert.defined());
  moe(x.requires_grad_(true)).sum().backward();
  auto once = moe->tokens_per_expert.clone();
  EXPECT_EQ(once.sum().item<float>(), 3 * 5 * 2);
  moe->tokens_per_expert.zero_();
  auto y = parallel::checkpointed(x, [&](const torch::Tensor& in) { return moe(in); });
  y.sum().backward();
  EXPECT_TRUE(torch::equal(moe->tokens_per_expert, once));
}

// The registry's Qwen3-MoE flavors: parameter shapes equal the built module's, and the active
// count is the total less (E - k) / E of the routed experts. 30B-A3B: 30.5B total, 3.3B active
// (Qwen's model card: 30.5B and 3.3B).
TEST(MoeLayer, Qwen3MoeFlavorsCountTheirParameters) {
  auto debug = models::model_flavor("qwen3_moe", "debugmodel");
  models::Transformer model(debug);
  int64_t numel = 0;
  auto shapes = models::parameter_shapes(debug);
  for (const auto& p : model->named_parameters()) {
    numel += p.value().numel();
    ASSERT_TRUE(shapes.count(p.key())) << p.key();
    EXPECT_EQ(shapes.at(p.key()), p.value().sizes().vec()) << p.key();
  }
  EXPECT_EQ(numel, models::count_params(debug).total);
  EXPECT_EQ(models::buffer_shapes(debug).size(), size_t(debug.n_layers));
  auto big = models::count_params(models::model_flavor("qwen3_moe", "30B-A3B"));
  EXPECT_NEAR(double(big.total) / 1e9, 30.5, 0.1);
  EXPECT_NEAR(double(big.active) / 1e9, 3.3, 0.1);
}

// Two ranks route different tokens; the update sums their counts, so both move their bias the
// same way and by the one-process rule: +coeff for the underloaded, -coeff for the overloaded,
// re-centred to mean zero. Counts are reset after.
TEST(MoeBalance, SumsCountsOverRanksAndMovesEveryBiasAlike) {
  auto store = testing::in_memory_store();
  std::vector<torch::Tensor> biases(2);
  auto errors = testing::on_thread_ranks(2, [&](int rank) {
    auto args = moe_args(4, 1);
    args.moe.load_balance_coeff = 0.5;
    models::Transformer model(args);
    auto& moe = *model->blocks().front()->moe;
    // rank 0 routed 6 tokens to expert 0, rank 1 6 to expert 1 and 2 to expert 2: sum (6, 6, 2, 0), mean 3.5.
    moe.tokens_per_expert = rank == 0 ? torch::tensor({6.0f, 0.0f, 0.0f, 0.0f}) : torch::tensor({0.0f, 6.0f, 2.0f, 0.0f});
    auto group = distributed::Communicator::create(store, "dp", rank, 2, std::chrono::seconds(60), "127.0.0.1");
    parallel::ExpertBalance balance({model.ptr().get()}, {group});
    balance.update();
    biases[size_t(rank)] = moe.expert_bias.clone();
    EXPECT_EQ(moe.tokens_per_expert.sum().item<float>(), 0.0f);
    auto metrics = balance.load_metrics();
    ASSERT_FALSE(metrics.empty());
    EXPECT_EQ(metrics[0].first, "moe/layer_0/load_min");
    EXPECT_DOUBLE_EQ(metrics[0].second, 0.0);
    EXPECT_NEAR(metrics[1].second, 6.0 / 3.5, 1e-9);  // load_max, relative to the mean
  });
  ASSERT_EQ(testing::rank_errors(errors), "");
  // sign(3.5 - n) * 0.5 = (-0.5, -0.5, 0.5, 0.5), mean 0.
  auto expected = torch::tensor({-0.5f, -0.5f, 0.5f, 0.5f});
  EXPECT_TRUE(torch::equal(biases[0], expected)) << biases[0];
  EXPECT_TRUE(torch::equal(biases[1], expected)) << biases[1];
}

}  // namespace
}  // namespace ctitan::moe_layer_test
