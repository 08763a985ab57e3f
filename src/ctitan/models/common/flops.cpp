#include "ctitan/models/common/flops.h"

#include "ctitan/models/common/parameter_shapes.h"

namespace ctitan::models {
namespace {

bool is_routed_expert(const std::string& fqn) { return fqn.find(".moe.experts.") != std::string::npos; }

}  // namespace

ParamCount count_params(const ModelArgs& a) {
  ParamCount c;
  int64_t experts = 0;
  for (const auto& [fqn, shape] : parameter_shapes(a)) {
    int64_t numel = 1;
    for (auto s : shape) numel *= s;
    c.total += numel;
    if (is_routed_expert(fqn)) experts += numel;
  }
  c.embedding = a.vocab_size * a.dim;
  c.output = a.tie_word_embeddings ? 0 : a.dim * a.vocab_size;
  // Each token passes through top_k of num_experts routed experts (torchtitan counts them so).
  c.active = c.total - experts + (a.moe.num_experts > 0 ? experts / a.moe.num_experts * a.moe.top_k : 0);
  return c;
}

double parameter_count(const ModelArgs& a) { return double(count_params(a).total); }

double flops_per_token(const ModelArgs& a, int64_t seq_len) {
  auto p = count_params(a);
  // A tied output layer still multiplies by vocab x dim weights each token: compute, as untied.
  double head = double(a.dim) * double(a.vocab_size) - double(p.output);
  // QK^T over qk_head_dim and PV over the value width: 6 L H (qk + v) T (12 L H head_dim T when equal).
  return 6.0 * (double(p.active - p.embedding) + head) +
         6.0 * double(a.n_layers) * double(a.n_heads) * double(a.qk_head_dim() + a.value_head_dim()) * double(seq_len);
}

}  // namespace ctitan::models
