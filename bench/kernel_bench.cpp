// `make bench`: each kernel the model uses from src/ctitan/ops against its tensor-op reference
// (the formulation a fused version replaces), timed in the same run at the 134M row's shapes
// (seq 512, batch 4, dim 768, 12 heads, ffn 2048, vocab 32000), bf16 activations, plus the debug
// model's seq-2048 attention. Attention and AdamW are upstream's (at::scaled_dot_product_attention,
// at::_fused_adamw_), chosen because they measured faster here than ctitan kernels; their rows
// time upstream's op against the tensor ops.
// Forward alone, and forward + backward with a fixed upstream gradient. The heap keeps freed
// blocks (as in training, see train/housekeeping.h), so page faults do not blur the comparison.
#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <torch/version.h>

#include "ctitan/common/build_info.h"
#include "ctitan/common/threads.h"
#include "ctitan/ops/adamw_update.h"
#include "ctitan/ops/attention.h"
#include "ctitan/ops/cross_entropy.h"
#include "ctitan/ops/rms_norm.h"
#include "ctitan/ops/rope.h"
#include "ctitan/ops/swiglu.h"
#include "ctitan/train/housekeeping.h"

namespace {

using Inputs = std::vector<torch::Tensor>;
using Op = std::function<torch::Tensor(const Inputs&)>;

// Mean milliseconds of `iters` calls after one warm-up call.
double time_ms(const std::function<void()>& f, int iters = 5) {
  f();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
}

struct Timing {
  double forward_ms, step_ms;  // step: forward + backward
};

Timing time_op(const Op& op, const Inputs& inputs) {
  Inputs leaves;
  for (const auto& x : inputs) leaves.push_back(x.is_floating_point() ? x.detach().requires_grad_() : x);
  double forward = time_ms([&] {
    torch::NoGradGuard no_grad;
    op(leaves);
  });
  double step = time_ms([&] {
    for (auto& leaf : leaves) {
      if (leaf.requires_grad()) leaf.mutable_grad() = torch::Tensor();
    }
    auto out = op(leaves);
    out.backward(torch::ones_like(out));
  });
  return {forward, step};
}

void row(const std::string& name, const Op& fused, const Op& reference, const Inputs& inputs) {
  auto f = time_op(fused, inputs), r = time_op(reference, inputs);
  fmt::print("{:<36} {:>9.2f} {:>9.2f} {:>11.2f} {:>11.2f} {:>9.2f}x\n", name, f.forward_ms, r.forward_ms, f.step_ms,
             r.step_ms, r.step_ms / f.step_ms);
  std::fflush(stdout);
}

torch::Tensor bf16_randn(std::vector<int64_t> shape, double scale = 1.0) {
  return (scale * torch::randn(shape)).to(torch::kBFloat16);
}

}  // namespace

int main() {
  int threads = ctitan::configure_threads();
  ctitan::train::retain_freed_memory_between_housekeeping();
  torch::manual_seed(0);
  fmt::print("kernel_bench: {} threads, 134M row shapes, bf16 unless named; ms per call (mean of 5 after a warm-up)\n", threads);
  fmt::print("CPU: {}; libtorch {}\n", ctitan::cpu_description(), TORCH_VERSION);
  fmt::print("{:<36} {:>9} {:>9} {:>11} {:>11} {:>10}\n", "kernel", "fused fwd", "ref fwd", "fused f+b", "ref f+b",
             "ref/fused");

  // (B*T, ffn) gate and up projections.
  // The kernel serves fp32 only (bf16 takes the tensor ops, faster there: ops/swiglu.cpp).
  row("swiglu fp32 (2048, 2048)", [](const Inputs& x) { return ctitan::ops::swiglu(x[0], x[1]); },
      [](const Inputs& x) { return ctitan::ops::swiglu_reference(x[0], x[1]); },
      {3.0 * torch::randn({2048, 2048}), torch::randn({2048, 2048})});
  // (B, T, dim) activations with an fp32 weight, as the model's norms.
  row("rms_norm (4, 512, 768)", [](const Inputs& x) { return ctitan::ops::rms_norm(x[0], x[1], 1e-5); },
      [](const Inputs& x) { return ctitan::ops::rms_norm_reference(x[0], x[1], 1e-5); },
      {bf16_randn({4, 512, 768}), 1 + torch::randn({768})});
  // (B, T, H, D) queries with the (T, D/2) angle tables.
  auto angles = torch::outer(torch::arange(512, torch::kFloat), torch::rand({32}));
  auto cos = angles.cos(), sin = angles.sin();
  row("rope (4, 512, 12, 64)", [&](const Inputs& x) { return ctitan::ops::rope(x[0], cos, sin); },
      [&](const Inputs& x) { return ctitan::ops::rope_reference(x[0], cos, sin); },
      {bf16_randn({4, 512, 12, 64})});
  // Attention is upstream's SDPA now (ops/attention.h): its row is SDPA against the tensor ops.
  auto attention = [](const Inputs& x) { return ctitan::ops::causal_attention(x[0], x[1], x[2]); };
  auto attention_ref = [](const Inputs& x) { return ctitan::ops::causal_attention_reference(x[0], x[1], x[2]); };
  row("attention=SDPA (4, 512, 12, 64)", attention, attention_ref,
      {bf16_randn({4, 512, 12, 64}), bf16_randn({4, 512, 12, 64}), bf16_randn({4, 512, 12, 64})});
  // The debug model at seq 2048: 16 heads of 16.
  row("attention=SDPA (1, 2048, 16, 16)", attention, attention_ref,
      {bf16_randn({1, 2048, 16, 16}), bf16_randn({1, 2048, 16, 16}), bf16_randn({1, 2048, 16, 16})});
  // (B*T, vocab) logits; the loss is a sum, as the trainer's.
  auto labels = torch::randint(0, 32000, {2048});
  row("cross_entropy_sum (2048, 32000)",
      [&](const Inputs& x) { return ctitan::ops::cross_entropy_sum(x[0], labels, -100); },
      [&](const Inputs& x) { return ctitan::ops::cross_entropy_sum_reference(x[0], labels, -100); },
      {bf16_randn({2048, 32000}, 2.0)});

  // AdamW over the 134M model's parameters as one 134M-element fp32 tensor (the update is
  // elementwise, so one tensor or 100 differ only in per-call overhead). The update is upstream's
  // _fused_adamw_ now (ops/adamw_update.h): its row is that against the tensor ops.
  {
    auto param = torch::randn({134'000'000}), grad = torch::randn({134'000'000});
    auto m = torch::zeros_like(param), v = torch::zeros_like(param);
    ctitan::ops::AdamWStep hyper{1e-4, 0.9, 0.95, 1e-8, 0.1, 1};
    double fused = time_ms([&] { ctitan::ops::adamw_update(param, grad, m, v, hyper); }, 3);
    double reference = time_ms([&] { ctitan::ops::adamw_update_reference(param, grad, m, v, hyper); }, 3);
    fmt::print("{:<36} {:>9} {:>9} {:>11.2f} {:>11.2f} {:>9.2f}x\n", "adamw=_fused_adamw_ (134M fp32)", "-", "-",
               fused, reference, reference / fused);
  }

  // What keeping bf16 weight copies (refreshed once per optimizer step) could save at most: the
  // casts autocast makes of the 134M model's Linear weights, fp32 -> bf16 in forward (once per
  // step: autocast caches them) and their gradients bf16 -> fp32 in backward (ToCopyBackward).
  // The copies would still cost one bf16 write per weight in the optimizer step.
  std::vector<torch::Tensor> weights;
  for (int layer = 0; layer < 12; ++layer) {
    for (int i = 0; i < 4; ++i) weights.push_back(torch::randn({768, 768}));  // wq, wk, wv, wo
    for (int i = 0; i < 3; ++i) weights.push_back(torch::randn({2048, 768}));  // w1, w3, w2 (transposed)
  }
  weights.push_back(torch::randn({32000, 768}));  // output
  std::vector<torch::Tensor> bf16_grads;
  for (const auto& w : weights) bf16_grads.push_back(w.to(torch::kBFloat16));
  double casts = time_ms([&] {
    for (size_t i = 0; i < weights.size(); ++i) {
      weights[i].to(torch::kBFloat16);
      bf16_grads[i].to(torch::kFloat);
    }
  });
  double refresh = time_ms([&] {
    for (size_t i = 0; i < weights.size(); ++i) bf16_grads[i].copy_(weights[i]);
  });
  fmt::print("\nautocast weight casts per 134M step (109.5M Linear weights, both directions): {:.1f} ms; "
             "a once-per-step bf16 refresh would cost {:.1f} ms of it back\n", casts, refresh);
  return 0;
}
