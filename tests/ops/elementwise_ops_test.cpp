// RMSNorm, RoPE and SwiGLU against their tensor-op references, forward and backward.
#include <ATen/autocast_mode.h>

#include "ctitan/ops/rms_norm.h"
#include "ctitan/ops/rope.h"
#include "ctitan/ops/swiglu.h"
#include "ops/op_check.h"

namespace ctitan::ops {
namespace {

using testing::expect_op_matches;

// fp32 tolerances: same math, different summation order and a 2-ulp exp: 1e-5 of the scale.
// bf16 tolerances: the fused op rounds its result once where the reference rounds after every
// op (2^-8 = 0.4% each), so a few roundings apart: 2e-2 of the scale.
constexpr double kFp32Tol = 1e-5, kBf16Tol = 2e-2;

void check_rms_norm(torch::ScalarType x_dtype, torch::ScalarType w_dtype, double tol) {
  torch::manual_seed(0);
  // 150 rows of 96: more rows than one weight-gradient chunk, and a non-trivial weight.
  std::vector<torch::Tensor> in = {(2 * torch::randn({3, 50, 96})).to(x_dtype), (1 + torch::randn({96})).to(w_dtype)};
  expect_op_matches([](const auto& x) { return rms_norm(x[0], x[1], 1e-5); },
                    [](const auto& x) { return rms_norm_reference(x[0], x[1], 1e-5); }, in, tol);
}

TEST(FusedRMSNorm, MatchesReferenceFp32) { check_rms_norm(torch::kFloat, torch::kFloat, kFp32Tol); }
TEST(FusedRMSNorm, MatchesReferenceBf16) { check_rms_norm(torch::kBFloat16, torch::kBFloat16, kBf16Tol); }
TEST(FusedRMSNorm, MatchesReferenceBf16InputFp32Weight) {
  check_rms_norm(torch::kBFloat16, torch::kFloat, kBf16Tol);
}

// Under bf16 autocast an fp32 x gives a bf16 output: exactly the reference's fp32 result rounded
// once, which is what the next Linear's autocast cast would have made of it. The gradients stay in
// their inputs' dtypes and match the reference's within bf16 rounding of the upstream gradient.
TEST(FusedRMSNorm, WritesAutocastDtypeForFp32Input) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> in = {(2 * torch::randn({3, 50, 96})), (1 + torch::randn({96}))};
  auto upstream = torch::randn({3, 50, 96}).to(torch::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  auto fused = testing::run_op([](const auto& x) { return rms_norm(x[0], x[1], 1e-5); }, in, upstream);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  auto reference = testing::run_op([](const auto& x) { return rms_norm_reference(x[0], x[1], 1e-5); }, in,
                                   upstream.to(torch::kFloat));
  EXPECT_EQ(fused.out.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(fused.out, reference.out.to(torch::kBFloat16)));
  EXPECT_EQ(fused.grads[0].scalar_type(), torch::kFloat);
  testing::expect_close(fused.grads[0], reference.grads[0], kFp32Tol, "grad of x");
  testing::expect_close(fused.grads[1], reference.grads[1], kFp32Tol, "grad of weight");
}

void check_rope(torch::ScalarType dtype, double tol) {
  torch::manual_seed(1);
  auto angles = torch::outer(torch::arange(40, torch::kFloat), torch::rand({8}));  // (max_seq 40, D/2 8)
  std::vector<torch::Tensor> in = {torch::randn({2, 33, 3, 16}).to(dtype)};
  auto cos = angles.cos(), sin = angles.sin();
  expect_op_matches([&](const auto& x) { return rope(x[0], cos, sin); },
                    [&](const auto& x) { return rope_reference(x[0], cos, sin); }, in, tol);
}

TEST(FusedRope, MatchesReferenceFp32) { check_rope(torch::kFloat, kFp32Tol); }
TEST(FusedRope, MatchesReferenceBf16) { check_rope(torch::kBFloat16, kBf16Tol); }

void check_swiglu(torch::ScalarType dtype, double tol) {
  torch::manual_seed(2);
  // Wide range of gate values: both tails of the sigmoid.
  std::vector<torch::Tensor> in = {(4 * torch::randn({64, 300})).to(dtype), torch::randn({64, 300}).to(dtype)};
  expect_op_matches([](const auto& x) { return swiglu(x[0], x[1]); },
                    [](const auto& x) { return swiglu_reference(x[0], x[1]); }, in, tol);
}

TEST(FusedSwiGLU, MatchesReferenceFp32) { check_swiglu(torch::kFloat, kFp32Tol); }
// bf16 takes the tensor ops (faster there): the same bits as the reference, forward and backward.
// The kernel rounds once from fp32 where the tensor ops round after each op, so it would differ.
TEST(FusedSwiGLU, Bf16TakesTheTensorOpsBitwise) {
  torch::manual_seed(3);
  auto a = (4 * torch::randn({64, 300})).to(torch::kBFloat16), b = torch::randn({64, 300}).to(torch::kBFloat16);
  auto grads = [&](auto fn) {
    auto x = a.clone().requires_grad_(), y = b.clone().requires_grad_();
    auto out = fn(x, y);
    out.backward(torch::ones_like(out));
    return std::vector<torch::Tensor>{out.detach(), x.grad(), y.grad()};
  };
  auto ours = grads([](const auto& x, const auto& y) { return swiglu(x, y); });
  auto ref = grads([](const auto& x, const auto& y) { return swiglu_reference(x, y); });
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_TRUE(torch::equal(ours[i], ref[i])) << i;
}

}  // namespace
}  // namespace ctitan::ops
