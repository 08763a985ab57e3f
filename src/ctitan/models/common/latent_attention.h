#pragma once
// Multi-head latent attention (DeepSeek-V2/V3), as torchtitan's deepseek_v3 Attention, with its
// parameter names: keys and values come from one low-rank latent per token (wkv_a: dim ->
// kv_lora_rank + qk_rope_head_dim, kv_norm, wkv_b: kv_lora_rank -> heads x (nope + v)); queries
// from wq, or through a latent of their own (wq_a, q_norm, wq_b) when q_lora_rank > 0. Each head's
// query and key join a part without position and a RoPE-rotated part; the key's rotated part is
// one per token, shared by every head. Softmax scale 1 / sqrt(qk_nope + qk_rope). No YaRN: the
// flavors stay within the original context (torchtitan applies it only beyond 4096 positions).
#include <torch/torch.h>

#include "ctitan/models/common/model_args.h"
#include "ctitan/models/common/module_hooks.h"

namespace ctitan::models {

class RMSNormImpl;
struct RopeTables;
struct KVCacheSlot;

class LatentAttentionImpl : public torch::nn::Module {
 public:
  explicit LatentAttentionImpl(const ModelArgs& args);
  // x: (B, T, dim) -> (B, T, dim), as AttentionImpl::forward; the cache holds each head's
  // expanded key (qk_nope + qk_rope) and value (v_head_dim).
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, KVCacheSlot* cache = nullptr);
  torch::nn::Linear wq{nullptr};                     // q_lora_rank 0
  torch::nn::Linear wq_a{nullptr}, wq_b{nullptr};    // q_lora_rank > 0
  std::shared_ptr<RMSNormImpl> q_norm, kv_norm;      // q_norm with wq_a only
  torch::nn::Linear wkv_a{nullptr}, wkv_b{nullptr}, wo{nullptr};

 private:
  int64_t n_heads_, kv_lora_rank_, nope_, rope_, v_dim_;
};
TORCH_MODULE(LatentAttention);

}  // namespace ctitan::models
