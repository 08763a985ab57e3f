#include "ctitan/ops/attention.h"

#include <ATen/autocast_mode.h>

#include "ops/op_check.h"

namespace ctitan::ops {
namespace {

using testing::expect_op_matches;

std::vector<torch::Tensor> qkv(int64_t B, int64_t T, int64_t H, int64_t D, torch::ScalarType dtype) {
  return {torch::randn({B, T, H, D}).to(dtype), torch::randn({B, T, H, D}).to(dtype),
          torch::randn({B, T, H, D}).to(dtype)};
}

// causal_attention is upstream's SDPA (flash kernel on CPU): these check ctitan's use of it
// (layout, causal mask, scale, autocast) against the plain formulation.
torch::Tensor fused(const std::vector<torch::Tensor>& x) { return causal_attention(x[0], x[1], x[2]); }
torch::Tensor reference(const std::vector<torch::Tensor>& x) { return causal_attention_reference(x[0], x[1], x[2]); }

// fp32: the same sums in a different order (blocked online softmax), so agreement to ~1e-6 of
// the scale; 1e-5 leaves room for a vectorized exp's few ulp.
TEST(CausalAttention, MatchesReferenceFp32) {
  torch::manual_seed(0);
  expect_op_matches(fused, reference, qkv(2, 37, 3, 16, torch::kFloat), 1e-5);
}

// T = 1100 is not a multiple of any block size the flash kernel uses: partial blocks at the
// edges, and the causal skipping of later key blocks, are exercised.
TEST(CausalAttention, MatchesReferenceFp32AcrossQueryBlocks) {
  torch::manual_seed(1);
  expect_op_matches(fused, reference, qkv(1, 1100, 1, 8, torch::kFloat), 1e-5);
}

// bf16: both sides round scores and probabilities to bf16 (8 significant bits, 2^-8 = 0.4%), but
// at different points (the reference also rounds the scaled scores and the fp32 gradient
// chain), so several roundings separate them: 3% of the scale.
TEST(CausalAttention, MatchesReferenceBf16) {
  torch::manual_seed(2);
  expect_op_matches(fused, reference, qkv(2, 300, 2, 32, torch::kBFloat16), 3e-2);
}

// Under autocast with fp32 inputs the op must still compute in fp32 (autocast is a no-op for it).
TEST(CausalAttention, IgnoresAutocastForFp32Inputs) {
  torch::manual_seed(3);
  auto x = qkv(1, 50, 2, 16, torch::kFloat);
  auto expected = causal_attention_reference(x[0], x[1], x[2]);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  auto got = causal_attention(x[0], x[1], x[2]);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  EXPECT_EQ(got.scalar_type(), torch::kFloat);
  testing::expect_close(got, expected, 1e-5, "output under autocast");
}

// Queries that start at position q_start > 0 against keys [0, q_start + T), as incremental
// decoding runs them: each must equal the same query's row of the whole sequence's attention
// (the mask aligns to the bottom right, not SDPA's top-left is_causal). fp32; the tolerance is
// the one above: the same sums in another order.
TEST(CausalAttention, QueriesAfterCachedKeysMatchTheFullSequence) {
  torch::manual_seed(4);
  auto x = qkv(2, 23, 2, 16, torch::kFloat);
  auto whole = causal_attention_reference(x[0], x[1], x[2]);  // (B, 23, H*D)
  for (int64_t q_start : {1, 10, 22}) {
    auto q = x[0].narrow(1, q_start, 23 - q_start);
    auto expected = whole.narrow(1, q_start, 23 - q_start);
    testing::expect_close(causal_attention(q, x[1], x[2], q_start), expected, 1e-5, "fused");
    testing::expect_close(causal_attention_reference(q, x[1], x[2], q_start), expected, 1e-5, "reference");
  }
}

}  // namespace
}  // namespace ctitan::ops
