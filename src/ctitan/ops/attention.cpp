#include "ctitan/ops/attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ctitan/ops/fusion_switch.h"
#include "ctitan/ops/lanes.h"
#include "ctitan/ops/scalar_math.h"

namespace ctitan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Queries per block: the block's (B*H, Bq, keys) score tile should stay a few MB so that the
// fused softmax reads it back from cache, yet the matmuls should stay large enough to be
// efficient.
int64_t query_block(int64_t bh, int64_t t) {
  constexpr int64_t kTileBytes = 16 << 20;
  int64_t bq = kTileBytes / std::max<int64_t>(1, bh * t * 4);
  bq = std::clamp<int64_t>(bq / 16 * 16, 64, 512);
  return std::min(bq, t);
}

// Forward softmax of one score tile. s: (BH, Bq, L) scores of queries q0.. against keys 0..L-1.
// Writes p (same shape, storage dtype) with zeros above the diagonal, and lse: (BH, Bq) fp32.
template <typename T>
void softmax_tile(const T* s, T* p, float* lse, int64_t rows_per_head, int64_t n_rows, int64_t L, int64_t q0,
                  float scale) {
  at::parallel_for(0, n_rows, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> e(L);
    for (int64_t row = begin; row < end; ++row) {
      const T* srow = s + row * L;
      T* prow = p + row * L;
      int64_t valid = q0 + row % rows_per_head + 1;  // causal: keys 0..q
      float m = scale * lane_max(valid, [&](int64_t j) { return to_float(srow[j]); });  // scale > 0
      float* er = e.data();
      float sum = lane_sum(valid, [&](int64_t j) { return er[j] = fast_exp(to_float(srow[j]) * scale - m); });
      float inv = 1.0f / sum;
      for (int64_t j = 0; j < valid; ++j) prow[j] = from_float<T>(er[j] * inv);
      for (int64_t j = valid; j < L; ++j) prow[j] = from_float<T>(0.0f);
      lse[row] = m + std::log(sum);
    }
  });
}

// Backward of one tile: recomputes p = exp(s * scale - lse) and ds = p * (dp - delta) * scale,
// where delta = rowsum(dO * O). s, dp: (BH, Bq, L); lse, delta: (BH, Bq) fp32.
template <typename T>
void softmax_backward_tile(const T* s, const T* dp, const float* lse, const float* delta, T* p, T* ds,
                           int64_t rows_per_head, int64_t n_rows, int64_t L, int64_t q0, float scale) {
  at::parallel_for(0, n_rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t off = row * L, valid = q0 + row % rows_per_head + 1;
      float l = lse[row], d = delta[row];
      for (int64_t j = 0; j < valid; ++j) {
        float pj = fast_exp(to_float(s[off + j]) * scale - l);
        p[off + j] = from_float<T>(pj);
        ds[off + j] = from_float<T>(pj * (to_float(dp[off + j]) - d) * scale);
      }
      for (int64_t j = valid; j < L; ++j) {
        p[off + j] = from_float<T>(0.0f);
        ds[off + j] = from_float<T>(0.0f);
      }
    }
  });
}

// (B, T, H, D) -> (B*H, T, D) contiguous in `dtype`.
torch::Tensor heads_first(const torch::Tensor& x, torch::ScalarType dtype) {
  return x.to(dtype).transpose(1, 2).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)}).contiguous();
}

class CausalAttention : public torch::autograd::Function<CausalAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in, const torch::Tensor& k_in,
                               const torch::Tensor& v_in) {
    // Autocast would re-cast the fp32 tiles we hand to bmm; the dtype is chosen here instead.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
    auto dtype = q_in.scalar_type();
    int64_t B = q_in.size(0), T = q_in.size(1), H = q_in.size(2), D = q_in.size(3), BH = B * H;
    auto q = heads_first(q_in, dtype), k = heads_first(k_in, dtype), v = heads_first(v_in, dtype);  // (BH, T, D)
    auto out = torch::empty_like(q);
    auto lse = torch::empty({BH, T}, q.options().dtype(torch::kFloat));
    float scale = float(1.0 / std::sqrt(double(D)));
    int64_t bq = query_block(BH, T);
    for (int64_t q0 = 0; q0 < T; q0 += bq) {
      int64_t n = std::min(bq, T - q0), L = q0 + n;  // keys beyond the block's last query are masked
      auto s = torch::bmm(q.narrow(1, q0, n), k.narrow(1, 0, L).transpose(1, 2));  // (BH, n, L)
      auto p = torch::empty_like(s);
      auto lse_blk = torch::empty({BH, n}, lse.options());
      dispatch_float_or_bf16(dtype, "causal_attention", [&](auto tag) {
        using T_ = decltype(tag);
        softmax_tile<T_>(s.data_ptr<T_>(), p.data_ptr<T_>(), lse_blk.data_ptr<float>(), n, BH * n, L, q0, scale);
      });
      lse.narrow(1, q0, n).copy_(lse_blk);
      out.narrow(1, q0, n).copy_(torch::bmm(p, v.narrow(1, 0, L)));  // (BH, n, D)
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["shape"] = std::vector<int64_t>{B, T, H, D};
    ctx->saved_data["dtypes"] = std::vector<int64_t>{int64_t(q_in.scalar_type()), int64_t(k_in.scalar_type()),
                                                      int64_t(v_in.scalar_type())};
    // (BH, T, D) -> (B, T, H*D)
    return out.view({B, H, T, D}).transpose(1, 2).reshape({B, T, H * D});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
    auto saved = ctx->get_saved_variables();
    auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    auto shape = ctx->saved_data["shape"].toIntVector();
    auto dtypes = ctx->saved_data["dtypes"].toIntVector();
    int64_t B = shape[0], T = shape[1], H = shape[2], D = shape[3], BH = B * H;
    auto dtype = q.scalar_type();
    // (B, T, H*D) -> (BH, T, D)
    auto dout = grads[0].to(dtype).view({B, T, H, D}).transpose(1, 2).reshape({BH, T, D}).contiguous();
    auto delta = (dout.to(torch::kFloat) * out.to(torch::kFloat)).sum(-1);  // (BH, T)
    auto dq = torch::empty_like(q);
    // dk and dv gather contributions from every later query block: accumulate them in fp32.
    auto dk = torch::zeros({BH, T, D}, q.options().dtype(torch::kFloat));
    auto dv = torch::zeros_like(dk);
    float scale = float(1.0 / std::sqrt(double(D)));
    int64_t bq = query_block(BH, T);
    for (int64_t q0 = 0; q0 < T; q0 += bq) {
      int64_t n = std::min(bq, T - q0), L = q0 + n;
      auto qb = q.narrow(1, q0, n), dob = dout.narrow(1, q0, n);  // (BH, n, D)
      auto kp = k.narrow(1, 0, L), vp = v.narrow(1, 0, L);        // (BH, L, D)
      auto s = torch::bmm(qb, kp.transpose(1, 2));                 // (BH, n, L)
      auto dp = torch::bmm(dob, vp.transpose(1, 2));               // (BH, n, L)
      auto lse_blk = lse.narrow(1, q0, n).contiguous(), delta_blk = delta.narrow(1, q0, n).contiguous();
      auto p = torch::empty_like(s), ds = torch::empty_like(s);
      dispatch_float_or_bf16(dtype, "causal_attention", [&](auto tag) {
        using T_ = decltype(tag);
        softmax_backward_tile<T_>(s.data_ptr<T_>(), dp.data_ptr<T_>(), lse_blk.data_ptr<float>(),
                                  delta_blk.data_ptr<float>(), p.data_ptr<T_>(), ds.data_ptr<T_>(), n, BH * n, L,
                                  q0, scale);
      });
      dq.narrow(1, q0, n).copy_(torch::bmm(ds, kp));
      dk.narrow(1, 0, L).add_(torch::bmm(ds.transpose(1, 2), qb));
      dv.narrow(1, 0, L).add_(torch::bmm(p.transpose(1, 2), dob));
    }
    // (BH, T, D) -> (B, T, H, D) in each input's dtype
    auto back = [&](const torch::Tensor& g, int64_t dt) {
      return g.view({B, H, T, D}).transpose(1, 2).to(torch::ScalarType(dt));
    };
    return {back(dq, dtypes[0]), back(dk, dtypes[1]), back(dv, dtypes[2])};
  }
};

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
              "causal_attention: q, k, v must all be (B, T, H, D)");
  RECORD_FUNCTION("ctitan::causal_attention", std::vector<c10::IValue>());  // names the forward in profiles
  if (!q.is_cpu()) return causal_attention_sdpa(q, k, v);
  if (!fused_enabled("attention")) return causal_attention_reference(q, k, v);
  return CausalAttention::apply(q, k, v);
}

torch::Tensor causal_attention_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
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
