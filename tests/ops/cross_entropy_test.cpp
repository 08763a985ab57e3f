#include "ctitan/ops/cross_entropy.h"

#include "ops/op_check.h"

namespace ctitan::ops {
namespace {

constexpr int64_t kIgnore = -100;

// Labels with some rows ignored, as padding produces.
std::vector<torch::Tensor> inputs(int64_t N, int64_t V, torch::ScalarType dtype) {
  auto labels = torch::randint(0, V, {N}, torch::kLong);
  labels.index_put_({torch::arange(0, N, 7)}, kIgnore);
  return {(3 * torch::randn({N, V})).to(dtype), labels};
}

torch::Tensor fused_ce(const std::vector<torch::Tensor>& x) { return cross_entropy_sum(x[0], x[1], kIgnore); }
torch::Tensor reference_ce(const std::vector<torch::Tensor>& x) {
  return cross_entropy_sum_reference(x[0], x[1], kIgnore);
}

// fp32 all the way on both sides; the exp polynomial (2 ulp) and summation order differ: 1e-5.
TEST(FusedCrossEntropy, MatchesReferenceFp32) {
  torch::manual_seed(0);
  testing::expect_op_matches(fused_ce, reference_ce, inputs(300, 2048, torch::kFloat), 1e-5);
}

// bf16 logits: both sides read the same bf16 values and do fp32 math; the fused gradient is
// rounded to bf16 once (0.4%) where the reference rounds fp32 -> bf16 after its own chain: 1%.
TEST(FusedCrossEntropy, MatchesReferenceBf16) {
  torch::manual_seed(1);
  testing::expect_op_matches(fused_ce, reference_ce, inputs(200, 3001, torch::kBFloat16), 1e-2);
}

TEST(FusedCrossEntropy, AllRowsIgnoredGivesZeroLossAndGradient) {
  auto logits = torch::randn({4, 10}).set_requires_grad(true);
  auto loss = cross_entropy_sum(logits, torch::full({4}, kIgnore, torch::kLong), kIgnore);
  loss.backward();
  EXPECT_EQ(loss.item<float>(), 0.0f);
  EXPECT_EQ(logits.grad().abs().max().item<float>(), 0.0f);
}

// kDiscarded writes the gradient over the logits (the trainer's path): the same bits as kKept,
// in the logits' own buffer, not a second (N, V) one. Both dtypes, with ignored rows.
TEST(FusedCrossEntropy, DiscardedLogitsTakeTheGradientInTheirOwnBufferWithTheSameBits) {
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    torch::manual_seed(2);
    auto x = inputs(64, 1000, dtype);
    auto grad_for = [&](LogitsAfterLoss after, const void** grad_buffer, const void** logits_buffer) {
      auto leaf = x[0].clone().set_requires_grad(true);
      auto logits = leaf * 1;  // exact; a non-leaf, as a model's output is
      *logits_buffer = logits.data_ptr();
      logits.register_hook([grad_buffer](const torch::Tensor& g) { *grad_buffer = g.data_ptr(); });
      cross_entropy_sum(logits, x[1], kIgnore, after).backward();
      return leaf.grad();
    };
    const void *kept_grad = nullptr, *kept_logits = nullptr, *discarded_grad = nullptr, *discarded_logits = nullptr;
    auto kept = grad_for(LogitsAfterLoss::kKept, &kept_grad, &kept_logits);
    auto discarded = grad_for(LogitsAfterLoss::kDiscarded, &discarded_grad, &discarded_logits);
    EXPECT_TRUE(torch::equal(kept, discarded)) << c10::toString(dtype);
    EXPECT_NE(kept_grad, kept_logits) << c10::toString(dtype);
    EXPECT_EQ(discarded_grad, discarded_logits) << c10::toString(dtype);
  }
}

}  // namespace
}  // namespace ctitan::ops
