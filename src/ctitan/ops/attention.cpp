#include "ctitan/ops/attention.h"

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <limits>
#include <optional>

#include "ctitan/ops/fusion_switch.h"

namespace ctitan::ops {

namespace {

// (T, S) additive mask: 0 where the query at position q_start + i may see key j (j <= q_start + i),
// -inf elsewhere.
torch::Tensor causal_mask(int64_t T, int64_t S, int64_t q_start, const torch::TensorOptions& options) {
  return torch::full({T, S}, -std::numeric_limits<float>::infinity(), options.dtype(torch::kFloat)).triu(q_start + 1);
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               int64_t q_start) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.sizes().slice(0, 3) == v.sizes().slice(0, 3) &&
                  k.size(0) == q.size(0) && k.size(2) == q.size(2) && k.size(3) == q.size(3) &&
                  k.size(1) == q_start + q.size(1),
              "causal_attention: q must be (B, T, H, D), k (B, q_start + T, H, D) and v (B, q_start + T, H, Dv)");
  RECORD_FUNCTION("ctitan::causal_attention", std::vector<c10::IValue>());  // names the forward in profiles
  if (!fused_enabled("attention")) return causal_attention_reference(q, k, v, q_start);
  // The inputs' dtype decides the precision: autocast would recast fp32 inputs to bf16.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), S = k.size(1);
  // SDPA's is_causal aligns the mask to the top left, which is right only for square attention:
  // queries after cached keys get an explicit (T, S) mask.
  std::optional<at::Tensor> mask;
  if (q_start > 0) mask = causal_mask(T, S, q_start, q.options()).to(q.scalar_type());
  // (B, T, H, D) -> (B, H, T, D): SDPA attends over the last two dimensions per head.
  auto out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask,
                                              /*dropout_p=*/0.0, /*is_causal=*/q_start == 0);
  return out.transpose(1, 2).reshape({B, T, H * v.size(3)});
}

torch::Tensor causal_attention_reference(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                         const torch::Tensor& v_in, int64_t q_start) {
  int64_t B = q_in.size(0), T = q_in.size(1), H = q_in.size(2), D = q_in.size(3), S = k_in.size(1);
  auto q = q_in.transpose(1, 2), k = k_in.transpose(1, 2), v = v_in.transpose(1, 2);  // (B, H, T|S, D)
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(D)));  // (B, H, T, S)
  auto probs = torch::softmax(scores.to(torch::kFloat) + causal_mask(T, S, q_start, scores.options()), -1)
                   .to(q.scalar_type());
  return torch::matmul(probs, v).transpose(1, 2).reshape({B, T, H * v_in.size(3)});
}

}  // namespace ctitan::ops
