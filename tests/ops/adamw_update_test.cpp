#include "ctitan/ops/adamw_update.h"

#include <gtest/gtest.h>

#include <array>

#include "ctitan/ops/sum_of_squares.h"
#include "ops/op_check.h"

namespace ctitan::ops {
namespace {

// Three steps of the fused update (at::_fused_adamw_) against the tensor-op update from the same
// state. Both do the same fp32 operations per element, the fused kernel keeping intermediates in
// registers and vector lanes, so they agree to a few ulp: 1e-6 relative.
void check_adamw(torch::ScalarType grad_dtype) {
  torch::manual_seed(0);
  auto p = torch::randn({1000, 37}), m = torch::zeros_like(p), v = torch::zeros_like(p);
  auto p0 = p.clone(), p_ref = p.clone(), m_ref = m.clone(), v_ref = v.clone();
  for (int64_t step = 1; step <= 3; ++step) {
    auto g = torch::randn_like(p).to(grad_dtype);
    AdamWStep s{1e-2, 0.9, 0.95, 1e-8, 0.1, step};
    adamw_update(p, g, m, v, s);
    adamw_update_reference(p_ref, g, m_ref, v_ref, s);
  }
  testing::expect_close(p, p_ref, 1e-6, "param");
  testing::expect_close(m, m_ref, 1e-6, "exp_avg");
  testing::expect_close(v, v_ref, 1e-6, "exp_avg_sq");
  EXPECT_GT((p - p0).abs().max().item<double>(), 1e-3);  // the comparison is not between no-ops
}

TEST(FusedAdamW, MatchesTensorOpsFp32Grad) { check_adamw(torch::kFloat); }
TEST(FusedAdamW, MatchesTensorOpsBf16Grad) { check_adamw(torch::kBFloat16); }

// One multi-tensor call over parameters of different shapes and step counts (a parameter that had
// no gradient at some step lags behind) equals the per-parameter reference; tolerance as above.
TEST(FusedAdamW, ManyParametersInOneCallMatchPerParameterUpdates) {
  torch::manual_seed(5);
  std::vector<AdamWParam> fused;
  std::vector<std::array<torch::Tensor, 3>> reference;  // param, exp_avg, exp_avg_sq
  const std::vector<std::vector<int64_t>> shapes = {{7, 3}, {100}, {16, 16}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto p = torch::randn(shapes[i]), m = torch::rand(shapes[i]) * 0.1, v = torch::rand(shapes[i]) * 0.01;
    fused.push_back({p.clone(), torch::randn(shapes[i]).to(torch::kBFloat16), m.clone(), v.clone(), int64_t(i) + 1});
    reference.push_back({p.clone(), m.clone(), v.clone()});
  }
  AdamWStep hyper{1e-2, 0.9, 0.95, 1e-8, 0.1, 0};
  adamw_update_many(fused, hyper);
  for (size_t i = 0; i < fused.size(); ++i) {
    hyper.step = fused[i].step;
    auto& [p, m, v] = reference[i];
    adamw_update_reference(p, fused[i].grad, m, v, hyper);
    testing::expect_close(fused[i].param, p, 1e-6, "param " + std::to_string(i));
    testing::expect_close(fused[i].exp_avg, m, 1e-6, "exp_avg " + std::to_string(i));
    testing::expect_close(fused[i].exp_avg_sq, v, 1e-6, "exp_avg_sq " + std::to_string(i));
  }
}

// Accumulated in double, so equal to the double reference to ~1e-7 relative (fp32 partials over
// 16-element lanes).
TEST(SumOfSquares, MatchesReferenceForMixedTensors) {
  torch::manual_seed(1);
  std::vector<torch::Tensor> xs = {torch::randn({100000}), torch::randn({3, 5}).to(torch::kBFloat16), torch::Tensor(),
                                   torch::randn({64, 64}).t()};
  double expected = 0;
  for (const auto& x : xs) {
    if (x.defined()) expected += x.to(torch::kDouble).pow(2).sum().item<double>();
  }
  EXPECT_NEAR(sum_of_squares(xs), expected, 1e-6 * expected);
}

}  // namespace
}  // namespace ctitan::ops
