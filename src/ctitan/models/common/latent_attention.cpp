#include "ctitan/models/common/latent_attention.h"

#include "ctitan/models/common/deferred_init.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/ops/attention.h"

namespace ctitan::models {
LatentAttentionImpl::LatentAttentionImpl(const ModelArgs& args)
    : n_heads_(args.n_heads), kv_lora_rank_(args.kv_lora_rank), nope_(args.qk_nope_head_dim),
      rope_(args.qk_rope_head_dim), v_dim_(args.v_head_dim) {
  const int64_t qk = nope_ + rope_;
  if (args.q_lora_rank == 0) {
    wq = register_module("wq", bias_free_linear(args.dim, n_heads_ * qk));
  } else {
    wq_a = register_module("wq_a", bias_free_linear(args.dim, args.q_lora_rank));
    q_norm = register_module("q_norm", std::make_shared<RMSNormImpl>(args.q_lora_rank, args.norm_eps));
    wq_b = register_module("wq_b", bias_free_linear(args.q_lora_rank, n_heads_ * qk));
  }
  wkv_a = register_module("wkv_a", bias_free_linear(args.dim, kv_lora_rank_ + rope_));
  kv_norm = register_module("kv_norm", std::make_shared<RMSNormImpl>(kv_lora_rank_, args.norm_eps));
  wkv_b = register_module("wkv_b", bias_free_linear(kv_lora_rank_, n_heads_ * (nope_ + v_dim_)));
  wo = register_module("wo", bias_free_linear(n_heads_ * v_dim_, args.dim));
}

torch::Tensor LatentAttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope, KVCacheSlot* cache) {
  const int64_t B = x.size(0), T = x.size(1);
  // Head counts from the projections' widths (-1): tensor parallelism gives each rank some heads
  // by slicing wq (or wq_b) and wkv_b, and this code stays the same.
  auto q = (wq ? wq(x) : wq_b(q_norm->forward(wq_a(x)))).view({B, T, -1, nope_ + rope_});  // (B, T, H, qk)
  auto q_parts = q.split({nope_, rope_}, -1);
  q = torch::cat({q_parts[0], apply_rope(q_parts[1].contiguous(), rope)}, -1);
  auto kv_latent = wkv_a(x);  // (B, T, kv_lora + rope)
  auto latent_parts = kv_latent.split({kv_lora_rank_, rope_}, -1);
  auto k_rope = apply_rope(latent_parts[1].unsqueeze(2).contiguous(), rope);  // (B, T, 1, rope): one per token
  auto kv = wkv_b(kv_norm->forward(latent_parts[0])).view({B, T, -1, nope_ + v_dim_});
  auto kv_parts = kv.split({nope_, v_dim_}, -1);
  auto k = torch::cat({kv_parts[0], k_rope.expand({B, T, kv.size(2), rope_})}, -1);  // (B, T, H, qk)
  auto v = kv_parts[1].contiguous();                                               // (B, T, H, v)
  int64_t q_start = 0;
  if (cache) {
    q_start = cache->start;
    std::tie(k, v) = append_to_cache(*cache, k, v);  // (B, start + T, H, qk) and (.., v)
  }
  return wo(ops::causal_attention(q, k, v, q_start));  // scale 1 / sqrt(qk): SDPA's default for q's width
}

}  // namespace ctitan::models
