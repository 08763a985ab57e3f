#include "ctitan/ops/rms_norm.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>

#include <cmath>

#include "ctitan/ops/fusion_switch.h"
#include "ctitan/ops/lanes.h"
#include "ctitan/ops/scalar_math.h"

namespace ctitan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows per chunk of the weight-gradient reduction: fixed (not per thread) so that the sum order,
// and hence the result, does not depend on the thread count.
constexpr int64_t kRowsPerChunk = 64;

template <typename T, typename W, typename O>
void forward_rows(const T* x, const W* w, O* y, float* rstd, int64_t rows, int64_t dim, float eps) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* xr = x + i * dim;
      float ss = lane_sum(dim, [&](int64_t j) { return to_float(xr[j]) * to_float(xr[j]); });
      float r = 1.0f / std::sqrt(ss / float(dim) + eps);
      rstd[i] = r;
      // Rounded where the reference rounds: the normalised x and the weight to x's dtype.
      for (int64_t j = 0; j < dim; ++j) {
        float normed = to_float(from_float<T>(to_float(xr[j]) * r));
        y[i * dim + j] = from_float<O>(normed * to_float(from_float<T>(to_float(w[j]))));
      }
    }
  });
}

// dx = rstd * (gw - xhat * mean(gw * xhat)) with gw = g * w and xhat = x * rstd;
// dw = sum over rows of g * xhat, reduced per fixed chunk of rows into `dw_partial`.
template <typename T, typename W>
void backward_rows(const T* x, const W* w, const T* g, const float* rstd, T* dx, float* dw_partial, int64_t rows,
                   int64_t dim) {
  int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      float* dwc = dw_partial + c * dim;
      for (int64_t i = c * kRowsPerChunk; i < std::min(rows, (c + 1) * kRowsPerChunk); ++i) {
        const T *xr = x + i * dim, *gr = g + i * dim;
        float r = rstd[i];
        float dot = lane_sum(dim, [&](int64_t j) {
          float xhat = to_float(xr[j]) * r, gj = to_float(gr[j]);
          dwc[j] += gj * xhat;
          return gj * to_float(w[j]) * xhat;
        });
        float mean_dot = dot / float(dim);
        for (int64_t j = 0; j < dim; ++j) {
          float xhat = to_float(xr[j]) * r;
          dx[i * dim + j] = from_float<T>(r * (to_float(gr[j]) * to_float(w[j]) - xhat * mean_dot));
        }
      }
    }
  });
}

class RMSNormFn : public torch::autograd::Function<RMSNormFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& w_in,
                               double eps, c10::ScalarType out_dtype) {
    auto x = x_in.contiguous(), w = w_in.contiguous();
    int64_t dim = x.size(-1), rows = x.numel() / dim;
    auto y = torch::empty_like(x, x.options().dtype(out_dtype));
    auto rstd = torch::empty({rows}, x.options().dtype(torch::kFloat));
    dispatch_float_or_bf16(x.scalar_type(), "rms_norm", [&](auto xt) {
      dispatch_float_or_bf16(w.scalar_type(), "rms_norm", [&](auto wt) {
        dispatch_float_or_bf16(out_dtype, "rms_norm", [&](auto ot) {
          using T = decltype(xt);
          using W = decltype(wt);
          using O = decltype(ot);
          forward_rows(x.data_ptr<T>(), w.data_ptr<W>(), y.data_ptr<O>(), rstd.data_ptr<float>(), rows, dim,
                       float(eps));
        });
      });
    });
    ctx->save_for_backward({x, w, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto &x = saved[0], &w = saved[1], &rstd = saved[2];
    int64_t dim = x.size(-1), rows = x.numel() / dim;
    auto g = grads[0].to(x.scalar_type()).contiguous();
    auto dx = torch::empty_like(x);
    auto dw_partial = torch::zeros({(rows + kRowsPerChunk - 1) / kRowsPerChunk, dim}, rstd.options());
    dispatch_float_or_bf16(x.scalar_type(), "rms_norm", [&](auto xt) {
      dispatch_float_or_bf16(w.scalar_type(), "rms_norm", [&](auto wt) {
        using T = decltype(xt);
        using W = decltype(wt);
        backward_rows(x.data_ptr<T>(), w.data_ptr<W>(), g.data_ptr<T>(), rstd.data_ptr<float>(), dx.data_ptr<T>(),
                      dw_partial.data_ptr<float>(), rows, dim);
      });
    });
    return {dx, dw_partial.sum(0).to(w.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(weight.dim() == 1 && x.size(-1) == weight.size(0), "rms_norm: weight must be (dim) with x (..., dim)");
  RECORD_FUNCTION("ctitan::rms_norm", std::vector<c10::IValue>());  // names the forward in profiles
  if (!fused_for("rms_norm", x)) return rms_norm_reference(x, weight, eps);
  // Under autocast the output is every consumer's matmul input, which autocast would cast to its
  // lower-precision dtype once per consumer (three times for wq, wk, wv); writing that dtype here
  // rounds the same fp32 product once and saves those casts and their backward copies.
  auto out_dtype = x.scalar_type();
  if (at::autocast::is_autocast_enabled(at::kCPU) && out_dtype == torch::kFloat) out_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  return RMSNormFn::apply(x, weight, eps, out_dtype);
}

torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto xf = x.to(torch::kFloat);
  auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight.to(x.scalar_type());
}

}  // namespace ctitan::ops
