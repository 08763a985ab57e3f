#include "ctitan/models/common/flops.h"

#include <limits>

#include "ctitan/models/common/parameter_shapes.h"

namespace ctitan::models {
namespace {

bool is_routed_expert(const std::string& fqn) { return fqn.find(".moe.experts.") != std::string::npos; }

// Sizes within the config's bounds can multiply past 2^63 (dim 2^20 x heads 2^16 x head_dim
// 2^16): counts are summed in double, and count_params saturates rather than overflow.
struct Totals {
  double all = 0, experts = 0;
};
Totals totals(const ModelArgs& a) {
  Totals t;
  for (const auto& [fqn, shape] : parameter_shapes(a)) {
    double numel = 1;
    for (auto s : shape) numel *= double(s);
    t.all += numel;
    if (is_routed_expert(fqn)) t.experts += numel;
  }
  return t;
}

int64_t saturated(double v) { return v >= 9.2e18 ? std::numeric_limits<int64_t>::max() : int64_t(v); }

}  // namespace

ParamCount count_params(const ModelArgs& a) {
  ParamCount c;
  const auto t = totals(a);
  c.total = saturated(t.all);
  c.embedding = a.vocab_size * a.dim;
  c.output = a.tie_word_embeddings ? 0 : a.dim * a.vocab_size;
  // Each token passes through top_k of num_experts routed experts (torchtitan counts them so).
  c.active = saturated(t.all - t.experts +
                       (a.moe.num_experts > 0 ? t.experts / double(a.moe.num_experts) * double(a.moe.top_k) : 0));
  return c;
}

double parameter_count(const ModelArgs& a) { return totals(a).all; }

double flops_per_token(const ModelArgs& a, int64_t seq_len) {
  auto p = count_params(a);
  // A tied output layer still multiplies by vocab x dim weights each token: compute, as untied.
  double head = double(a.dim) * double(a.vocab_size) - double(p.output);
  // QK^T over qk_head_dim and PV over the value width: 6 L H (qk + v) T (12 L H head_dim T when equal).
  return 6.0 * (double(p.active - p.embedding) + head) +
         6.0 * double(a.n_layers) * double(a.n_heads) * double(a.qk_head_dim() + a.value_head_dim()) * double(seq_len);
}

}  // namespace ctitan::models
