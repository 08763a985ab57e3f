#include "ctitan/models/common/deferred_init.h"

#include <ATen/native/Resize.h>

namespace ctitan::models {
namespace {

thread_local bool deferring = false;

}  // namespace

DeferredInitScope::DeferredInitScope() : previous_(deferring) { deferring = true; }
DeferredInitScope::~DeferredInitScope() { deferring = previous_; }

void release_if_deferred(torch::nn::Module& module) {
  if (!deferring) return;
  for (auto& p : module.parameters(/*recurse=*/false)) {
    TORCH_CHECK(p.device().is_cpu(), "a deferred build constructs on the CPU");
    at::native::resize_bytes_cpu(p.storage().unsafeGetStorageImpl(), 0);
  }
}

torch::nn::Linear bias_free_linear(int64_t in, int64_t out) {
  torch::nn::Linear l(torch::nn::LinearOptions(in, out).bias(false));
  release_if_deferred(*l);
  return l;
}

bool is_deferred(const torch::Tensor& t) { return t.numel() > 0 && t.storage().nbytes() == 0; }

DeferredModel build_deferred(const ModelArgs& args) {
  DeferredModel out;
  {
    DeferredInitScope scope;
    out.model = Transformer(args);
  }
  out.draws = initial_draws(*out.model);
  return out;
}

}  // namespace ctitan::models
