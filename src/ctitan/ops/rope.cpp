#include "ctitan/ops/rope.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "ctitan/ops/fusion_switch.h"
#include "ctitan/ops/scalar_math.h"

namespace ctitan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rotates every pair of x (B, T, H, D) by +angle (forward) or -angle (backward, sign = -1).
template <typename T>
void rotate(const T* x, T* y, const float* cos, const float* sin, int64_t B, int64_t T_, int64_t H, int64_t D,
            float sign) {
  int64_t half = D / 2;
  at::parallel_for(0, B * T_, 4, [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const float *c = cos + (bt % T_) * half, *s = sin + (bt % T_) * half;
      for (int64_t h = 0; h < H; ++h) {
        int64_t off = (bt * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          float re = to_float(x[off + 2 * i]), im = to_float(x[off + 2 * i + 1]), si = sign * s[i];
          y[off + 2 * i] = from_float<T>(re * c[i] - im * si);
          y[off + 2 * i + 1] = from_float<T>(re * si + im * c[i]);
        }
      }
    }
  });
}

torch::Tensor rotated(const torch::Tensor& x_in, const torch::Tensor& cos, const torch::Tensor& sin, float sign) {
  auto x = x_in.contiguous();
  auto y = torch::empty_like(x);
  dispatch_float_or_bf16(x.scalar_type(), "rope", [&](auto tag) {
    using T = decltype(tag);
    rotate(x.data_ptr<T>(), y.data_ptr<T>(), cos.data_ptr<float>(), sin.data_ptr<float>(), x.size(0), x.size(1),
           x.size(2), x.size(3), sign);
  });
  return y;
}

class RopeFn : public torch::autograd::Function<RopeFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotated(x, cos, sin, 1.0f);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {rotated(grads[0], saved[0], saved[1], -1.0f), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && cos.size(0) >= x.size(1) && cos.size(1) == x.size(3) / 2,
              "rope: x must be (B, T, H, D) with even D and tables of at least (T, D/2)");
  RECORD_FUNCTION("ctitan::rope", std::vector<c10::IValue>());  // names the forward in profiles
  if (!fused_for("rope", x)) return rope_reference(x, cos, sin);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  // The tables are used as raw (T, D/2) fp32 rows.
  return RopeFn::apply(x, cos.to(torch::kFloat).contiguous(), sin.to(torch::kFloat).contiguous());
}

torch::Tensor rope_reference(const torch::Tensor& x, const torch::Tensor& cos_table, const torch::Tensor& sin_table) {
  auto B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  // (B, T, H, D/2, 2): adjacent pairs are the (real, imag) parts of one complex number.
  auto pairs = x.to(torch::kFloat).view({B, T, H, D / 2, 2});
  auto re = pairs.select(-1, 0), im = pairs.select(-1, 1);
  // (1, T, 1, D/2) broadcast over batch and heads.
  auto cos = cos_table.slice(0, 0, T).view({1, T, 1, D / 2});
  auto sin = sin_table.slice(0, 0, T).view({1, T, 1, D / 2});
  auto rotated = torch::stack({re * cos - im * sin, re * sin + im * cos}, -1);
  return rotated.view({B, T, H, D}).to(x.scalar_type());
}

}  // namespace ctitan::ops
