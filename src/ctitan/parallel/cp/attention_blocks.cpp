#include "ctitan/parallel/cp/attention_blocks.h"

#include <limits>

#include "ctitan/ops/fusion_switch.h"

namespace ctitan::parallel::cp {
namespace {

bool use_flash(const torch::Tensor& q, BlockKernel kernel) {
  return kernel == BlockKernel::kAuto && ops::fused_for("attention", q);
}

// (Tq, Tk) booleans: query i sees key j <= i (square blocks only).
torch::Tensor causal_keep(int64_t Tq, int64_t Tk, const torch::Device& device) {
  return torch::ones({Tq, Tk}, torch::TensorOptions().dtype(torch::kBool).device(device)).tril();
}

}  // namespace

torch::Tensor heads_first(const torch::Tensor& x, int64_t n_rep) {
  auto y = x.transpose(1, 2);  // (B, H_kv, T, D)
  if (n_rep == 1) return y;
  auto B = y.size(0), H = y.size(1), T = y.size(2), D = y.size(3);
  return y.unsqueeze(2).expand({B, H, n_rep, T, D}).reshape({B, H * n_rep, T, D});
}

torch::Tensor heads_back(const torch::Tensor& g, int64_t n_rep) {
  auto B = g.size(0), H = g.size(1), T = g.size(2), D = g.size(3);
  auto summed = n_rep == 1 ? g : g.view({B, H / n_rep, n_rep, T, D}).sum(2);
  return summed.transpose(1, 2);
}

std::pair<torch::Tensor, torch::Tensor> block_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v, bool causal, double scale,
                                                      BlockKernel kernel) {
  if (use_flash(q, kernel)) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, std::nullopt, scale);
    return {out.to(torch::kFloat), lse.to(torch::kFloat)};
  }
  auto scores = torch::matmul(q.to(torch::kFloat), k.to(torch::kFloat).transpose(-2, -1)) * scale;  // (B, H, Tq, Tk)
  if (causal) {
    scores = scores.masked_fill(causal_keep(q.size(2), k.size(2), q.device()).logical_not(),
                                -std::numeric_limits<float>::infinity());
  }
  auto lse = scores.logsumexp(-1);  // (B, H, Tq)
  auto out = torch::matmul((scores - lse.unsqueeze(-1)).exp(), v.to(torch::kFloat));
  return {out, lse};
}

void merge_block(torch::Tensor out, torch::Tensor lse, const torch::Tensor& block_out, const torch::Tensor& block_lse) {
  auto merged_lse = torch::logaddexp(lse, block_lse);
  out.copy_(out * (lse - merged_lse).exp().unsqueeze(-1) + block_out * (block_lse - merged_lse).exp().unsqueeze(-1));
  lse.copy_(merged_lse);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> block_backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                       const torch::Tensor& k, const torch::Tensor& v,
                                                                       const torch::Tensor& out,
                                                                       const torch::Tensor& lse, bool causal,
                                                                       double scale, BlockKernel kernel) {
  if (use_flash(q, kernel)) {
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, causal,
                                                                                  std::nullopt, scale);
    return {dq.to(torch::kFloat), dk.to(torch::kFloat), dv.to(torch::kFloat)};
  }
  auto qf = q.to(torch::kFloat), kf = k.to(torch::kFloat), vf = v.to(torch::kFloat);
  auto dof = dout.to(torch::kFloat);
  auto scores = torch::matmul(qf, kf.transpose(-2, -1)) * scale;  // (B, H, Tq, Tk)
  auto probs = (scores - lse.unsqueeze(-1)).exp();
  if (causal) probs = probs * causal_keep(q.size(2), k.size(2), q.device());
  auto dv = torch::matmul(probs.transpose(-2, -1), dof);                   // (B, H, Tk, D)
  auto dprobs = torch::matmul(dof, vf.transpose(-2, -1));                  // (B, H, Tq, Tk)
  auto row_dot = (dof * out.to(torch::kFloat)).sum(-1, /*keepdim=*/true);  // (B, H, Tq, 1)
  auto dscores = probs * (dprobs - row_dot) * scale;
  return {torch::matmul(dscores, kf), torch::matmul(dscores.transpose(-2, -1), qf), dv};
}

}  // namespace ctitan::parallel::cp
