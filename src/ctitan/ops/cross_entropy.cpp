#include "ctitan/ops/cross_entropy.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cmath>
#include <limits>

#include "ctitan/ops/fusion_switch.h"
#include "ctitan/ops/lanes.h"
#include "ctitan/ops/scalar_math.h"

namespace ctitan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Row log-sum-exp over one pass for the max and one for the sum; a row (V values) stays in cache.
template <typename T>
float row_logsumexp(const T* x, int64_t V) {
  float m = lane_max(V, [&](int64_t j) { return to_float(x[j]); });
  return m + std::log(lane_sum(V, [&](int64_t j) { return fast_exp(to_float(x[j]) - m); }));
}

class CrossEntropySum : public torch::autograd::Function<CrossEntropySum> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits_in, const torch::Tensor& labels_in,
                               int64_t ignore_index, bool overwrite_logits) {
    auto logits = logits_in.contiguous();
    auto labels = labels_in.to(torch::kLong).contiguous();
    int64_t N = logits.size(0), V = logits.size(1);
    auto lse = torch::empty({N}, logits.options().dtype(torch::kFloat));  // (N,)
    auto row_loss = torch::zeros({N}, lse.options());                     // (N,)
    const int64_t* y = labels.data_ptr<int64_t>();
    dispatch_float_or_bf16(logits.scalar_type(), "cross_entropy_sum", [&](auto tag) {
      using T = decltype(tag);
      const T* x = logits.data_ptr<T>();
      float *l = lse.data_ptr<float>(), *loss = row_loss.data_ptr<float>();
      at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          l[i] = row_logsumexp(x + i * V, V);
          if (y[i] == ignore_index) continue;
          TORCH_CHECK(y[i] >= 0 && y[i] < V, "cross_entropy_sum: label ", y[i], " outside [0, ", V, ")");
          loss[i] = l[i] - to_float(x[i * V + y[i]]);
        }
      });
    });
    ctx->save_for_backward({logits, labels, lse});
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["overwrite_logits"] = overwrite_logits;
    return row_loss.to(torch::kDouble).sum().to(torch::kFloat);  // summed in double: N can be large
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto &logits = saved[0], &labels = saved[1], &lse = saved[2];
    int64_t ignore_index = ctx->saved_data["ignore_index"].toInt();
    int64_t N = logits.size(0), V = logits.size(1);
    float g = grads[0].item<float>();
    // (N, V) in the logits' dtype; over the logits themselves when the caller has dropped them.
    auto dlogits = ctx->saved_data["overwrite_logits"].toBool() ? logits : torch::empty_like(logits);
    const int64_t* y = labels.data_ptr<int64_t>();
    const float* l = lse.data_ptr<float>();
    dispatch_float_or_bf16(logits.scalar_type(), "cross_entropy_sum", [&](auto tag) {
      using T = decltype(tag);
      const T* x = logits.data_ptr<T>();
      T* dx = dlogits.data_ptr<T>();
      at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const T* xr = x + i * V;
          T* dr = dx + i * V;
          const bool ignored = y[i] == ignore_index;
          float gi = ignored ? 0.0f : g;
          // Read before the row is written: dr may be xr.
          const float label_logit = ignored ? 0.0f : to_float(xr[y[i]]);
          for (int64_t j = 0; j < V; ++j) dr[j] = from_float<T>(gi * fast_exp(to_float(xr[j]) - l[i]));
          if (!ignored) dr[y[i]] = from_float<T>(gi * (fast_exp(label_logit - l[i]) - 1.0f));
        }
      });
    });
    return {dlogits, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index,
                                LogitsAfterLoss after) {
  TORCH_CHECK(logits.dim() == 2 && labels.dim() == 1 && labels.size(0) == logits.size(0),
              "cross_entropy_sum: logits must be (N, V) and labels (N)");
  RECORD_FUNCTION("ctitan::cross_entropy_sum", std::vector<c10::IValue>());  // names the forward in profiles
  if (!fused_for("cross_entropy", logits)) return cross_entropy_sum_reference(logits, labels, ignore_index);
  // Autocast has nothing to do here: the math is fp32 whatever the storage dtype.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  return CrossEntropySum::apply(logits, labels, ignore_index, after == LogitsAfterLoss::kDiscarded);
}

torch::Tensor row_max(const torch::Tensor& logits_in) {
  TORCH_CHECK(logits_in.dim() == 2, "row_max: logits must be (N, V)");
  const int64_t N = logits_in.size(0), V = logits_in.size(1);
  if (V == 0) return torch::full({N}, -std::numeric_limits<float>::infinity(), logits_in.options().dtype(torch::kFloat));
  if (!fused_for("cross_entropy", logits_in)) return std::get<0>(logits_in.to(torch::kFloat).max(1));
  auto logits = logits_in.contiguous();
  auto out = torch::empty({N}, logits.options().dtype(torch::kFloat));
  dispatch_float_or_bf16(logits.scalar_type(), "row_max", [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data_ptr<T>();
    float* m = out.data_ptr<float>();
    at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) m[i] = lane_max(V, [&](int64_t j) { return to_float(x[i * V + j]); });
    });
  });
  return out;
}

torch::Tensor row_sum_exp(const torch::Tensor& logits_in, const torch::Tensor& shift_in) {
  TORCH_CHECK(logits_in.dim() == 2 && shift_in.dim() == 1 && shift_in.size(0) == logits_in.size(0),
              "row_sum_exp: logits (N, V) and shift (N)");
  const int64_t N = logits_in.size(0), V = logits_in.size(1);
  if (!fused_for("cross_entropy", logits_in)) {
    return (logits_in.to(torch::kFloat) - shift_in.unsqueeze(1)).exp().sum(1);
  }
  auto logits = logits_in.contiguous();
  auto shift = shift_in.to(torch::kFloat).contiguous();
  auto out = torch::zeros({N}, shift.options());
  if (V == 0) return out;
  dispatch_float_or_bf16(logits.scalar_type(), "row_sum_exp", [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data_ptr<T>();
    const float* s = shift.data_ptr<float>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        o[i] = lane_sum(V, [&](int64_t j) { return fast_exp(to_float(x[i * V + j]) - s[i]); });
      }
    });
  });
  return out;
}

torch::Tensor softmax_minus_onehot(const torch::Tensor& logits_in, const torch::Tensor& lse_in,
                                   const torch::Tensor& local_label_in, const torch::Tensor& row_scale_in) {
  const int64_t N = logits_in.size(0), V = logits_in.size(1);
  auto lse = lse_in.to(torch::kFloat).contiguous();
  auto scale = row_scale_in.to(torch::kFloat).contiguous();
  auto label = local_label_in.to(torch::kLong).contiguous();
  if (!fused_for("cross_entropy", logits_in)) {
    auto grad = (logits_in.to(torch::kFloat) - lse.unsqueeze(1)).exp();
    auto owned = label >= 0;
    if (V > 0) {
      grad.scatter_add_(1, label.clamp_min(0).unsqueeze(1), -owned.unsqueeze(1).to(torch::kFloat));
    }
    return (grad * scale.unsqueeze(1)).to(logits_in.scalar_type());
  }
  auto logits = logits_in.contiguous();
  auto dlogits = torch::empty_like(logits);  // (N, V) in the logits' dtype
  dispatch_float_or_bf16(logits.scalar_type(), "softmax_minus_onehot", [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data_ptr<T>();
    T* dx = dlogits.data_ptr<T>();
    const float *l = lse.data_ptr<float>(), *g = scale.data_ptr<float>();
    const int64_t* y = label.data_ptr<int64_t>();
    at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T* xr = x + i * V;
        T* dr = dx + i * V;
        for (int64_t j = 0; j < V; ++j) dr[j] = from_float<T>(g[i] * fast_exp(to_float(xr[j]) - l[i]));
        if (y[i] >= 0) {
          TORCH_CHECK(y[i] < V, "softmax_minus_onehot: local label ", y[i], " outside [0, ", V, ")");
          dr[y[i]] = from_float<T>(g[i] * (fast_exp(to_float(xr[y[i]]) - l[i]) - 1.0f));
        }
      }
    });
  });
  return dlogits;
}

torch::Tensor cross_entropy_sum_reference(const torch::Tensor& logits, const torch::Tensor& labels,
                                          int64_t ignore_index) {
  return torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat), labels,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(ignore_index));
}

}  // namespace ctitan::ops
