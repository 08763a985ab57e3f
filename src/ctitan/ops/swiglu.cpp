#include "ctitan/ops/swiglu.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "ctitan/ops/fusion_switch.h"
#include "ctitan/ops/scalar_math.h"

namespace ctitan::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kGrain = 1 << 14;

class SwiGLUFn : public torch::autograd::Function<SwiGLUFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a_in, const torch::Tensor& b_in) {
    auto a = a_in.contiguous(), b = b_in.to(a.scalar_type()).contiguous();
    auto y = torch::empty_like(a);
    dispatch_float_or_bf16(a.scalar_type(), "swiglu", [&](auto tag) {
      using T = decltype(tag);
      const T *pa = a.data_ptr<T>(), *pb = b.data_ptr<T>();
      T* py = y.data_ptr<T>();
      at::parallel_for(0, a.numel(), kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          float ai = to_float(pa[i]);
          py[i] = from_float<T>(ai / (1.0f + fast_exp(-ai)) * to_float(pb[i]));
        }
      });
    });
    ctx->save_for_backward({a, b});
    return y;
  }

  // With s = sigmoid(a): d silu(a) / da = s * (1 + a * (1 - s)).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto &a = saved[0], &b = saved[1];
    auto g = grads[0].to(a.scalar_type()).contiguous();
    auto da = torch::empty_like(a), db = torch::empty_like(b);
    dispatch_float_or_bf16(a.scalar_type(), "swiglu", [&](auto tag) {
      using T = decltype(tag);
      const T *pa = a.data_ptr<T>(), *pb = b.data_ptr<T>(), *pg = g.data_ptr<T>();
      T *pda = da.data_ptr<T>(), *pdb = db.data_ptr<T>();
      at::parallel_for(0, a.numel(), kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          float ai = to_float(pa[i]), gi = to_float(pg[i]);
          float s = 1.0f / (1.0f + fast_exp(-ai));
          pda[i] = from_float<T>(gi * to_float(pb[i]) * s * (1.0f + ai * (1.0f - s)));
          pdb[i] = from_float<T>(gi * ai * s);
        }
      });
    });
    return {da, db};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.sizes() == b.sizes(), "swiglu: a and b must have one shape");
  RECORD_FUNCTION("ctitan::swiglu", std::vector<c10::IValue>());  // names the forward in profiles
  // bf16 takes the tensor ops: with libtorch 2.15 on AVX512-BF16 they train the 134M model 3-7%
  // faster than this kernel (two A/B pairs of `ctitan train`; kernel_bench: 0.57x at its shape),
  // and tie at the debug model's. fp32 keeps the kernel, 1-5% ahead at the debug model
  // (docs/PERFORMANCE.md, "Kernels").
  if (a.scalar_type() == torch::kBFloat16 || !fused_for("swiglu", a)) return swiglu_reference(a, b);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  return SwiGLUFn::apply(a, b);
}

torch::Tensor swiglu_reference(const torch::Tensor& a, const torch::Tensor& b) { return torch::silu(a) * b; }

}  // namespace ctitan::ops
