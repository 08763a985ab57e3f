#include "ctitan/ops/attention.h"

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <limits>

#include "ctitan/ops/fusion_switch.h"

namespace ctitan::ops {

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
              "causal_attention: q, k, v must all be (B, T, H, D)");
  RECORD_FUNCTION("ctitan::causal_attention", std::vector<c10::IValue>());  // names the forward in profiles
  if (!fused_enabled("attention")) return causal_attention_reference(q, k, v);
  // The inputs' dtype decides the precision: autocast would recast fp32 inputs to bf16.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3);
  // (B, T, H, D) -> (B, H, T, D): SDPA attends over the last two dimensions per head.
  auto out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
  return out.transpose(1, 2).reshape({B, T, H * D});
}

torch::Tensor causal_attention_reference(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                         const torch::Tensor& v_in) {
  int64_t B = q_in.size(0), T = q_in.size(1), H = q_in.size(2), D = q_in.size(3);
  auto q = q_in.transpose(1, 2), k = k_in.transpose(1, 2), v = v_in.transpose(1, 2);  // (B, H, T, D)
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(D)));  // (B, H, T, T)
  auto mask = torch::full({T, T}, -std::numeric_limits<float>::infinity(), scores.options().dtype(torch::kFloat))
                  .triu(1);
  auto probs = torch::softmax(scores.to(torch::kFloat) + mask, -1).to(q.scalar_type());
  return torch::matmul(probs, v).transpose(1, 2).reshape({B, T, H * D});
}

}  // namespace ctitan::ops
