#pragma once
// Shared by the fused-op tests: run an op and its unfused reference on the same inputs with the
// same upstream gradient, and compare outputs and every input gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

namespace ctitan::ops::testing {

using OpFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

struct OpResult {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;
};

// Leaves are fresh copies of `inputs` (requiring grad where the input is floating point);
// backward uses `upstream`, which has the output's shape.
inline OpResult run_op(const OpFn& op, const std::vector<torch::Tensor>& inputs, const torch::Tensor& upstream) {
  std::vector<torch::Tensor> leaves;
  for (const auto& x : inputs) {
    auto leaf = x.detach().clone();
    if (leaf.is_floating_point()) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  auto out = op(leaves);
  out.backward(upstream.to(out.scalar_type()));
  OpResult r{out.detach(), {}};
  for (const auto& leaf : leaves) r.grads.push_back(leaf.grad().defined() ? leaf.grad() : torch::Tensor());
  return r;
}

// max |a - b| <= rtol * max |b|: an error relative to the tensor's scale, so that the tolerance
// means "this many bits of the result are right" whatever the values' magnitude.
inline void expect_close(const torch::Tensor& a, const torch::Tensor& b, double rtol, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  auto af = a.to(torch::kDouble), bf = b.to(torch::kDouble);
  double err = (af - bf).abs().max().item<double>(), scale = bf.abs().max().item<double>();
  EXPECT_LE(err, rtol * scale) << what << ": max error " << err << " against max magnitude " << scale;
}

// Compares the fused op with its reference, forward and every floating-point input's gradient.
inline void expect_op_matches(const OpFn& fused, const OpFn& reference, const std::vector<torch::Tensor>& inputs,
                              double rtol) {
  auto probe = reference(inputs);
  auto upstream = torch::randn(probe.sizes(), torch::kFloat);
  auto a = run_op(fused, inputs, upstream), b = run_op(reference, inputs, upstream);
  EXPECT_EQ(a.out.scalar_type(), b.out.scalar_type());
  expect_close(a.out, b.out, rtol, "output");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_floating_point()) expect_close(a.grads[i], b.grads[i], rtol, "grad of input " + std::to_string(i));
  }
}

}  // namespace ctitan::ops::testing
