#pragma once
// The decoder-only transformer every family builds (Llama 3, Qwen3, Qwen3-MoE, DeepSeek-V3), as
// plain libtorch modules; ModelArgs switches the features a family adds (QK-norm, a head_dim
// apart from dim / n_heads, tied embeddings, mixture-of-experts layers, latent attention). Parameter names match torchtitan's, e.g.
// `layers.3.attention.wq.weight`, because checkpoints and sharding address parameters by name.
// Nothing here knows about parallelism: parallel/ wraps these modules from outside.
#include <torch/torch.h>

#include "ctitan/models/common/model_args.h"
#include "ctitan/models/common/module_hooks.h"
#include "ctitan/models/common/latent_attention.h"
#include "ctitan/models/common/moe.h"

namespace ctitan::models {

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Rotary embedding tables for positions [0, positions): cos and sin, each (positions, head_dim/2).
// `positions` is the model's max_seq_len unless given (a KV cache needs only its own length).
struct RopeTables {
  torch::Tensor cos, sin;
};
RopeTables make_rope_tables(const ModelArgs& args, torch::Device device, int64_t positions = -1);

// x: (B, T, n_heads, head_dim). Rotates adjacent pairs (2i, 2i+1) as Meta's reference does with
// complex numbers, computed in fp32.
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope);

// One layer's keys and values for incremental decoding (kv_cache.h owns them), as Meta's reference
// Llama keeps cache_k / cache_v per attention layer.
struct KVCacheSlot {
  torch::Tensor keys, values;  // (B, max_len, n_kv_heads, head_dim); positions [0, start) are filled
  int64_t start = 0;           // the position of x's first token
};

// Writes x's keys and values (B, T, heads, D) into `cache` at [start, start + T) and returns every
// cached position's, (B, start + T, heads, D) each.
std::pair<torch::Tensor, torch::Tensor> append_to_cache(KVCacheSlot& cache, const torch::Tensor& k,
                                                         const torch::Tensor& v);

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelArgs& args);
  // x: (B, T, dim) -> (B, T, dim). `rope` covers x's positions. With `cache`, x's keys and values
  // are written into it at [start, start + T) and x attends to every cached position before its
  // own as well; without, x is the whole sequence (training).
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, KVCacheSlot* cache = nullptr);
  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
  // Per-head RMSNorm of queries and keys before RoPE (args.qk_norm, Qwen3); null without.
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  // The model's hooks, through which the projections are called (async tensor parallelism
  // replaces them there by matmuls fused with their collectives); null: plain calls.
  const ModuleHooks* hooks = nullptr;

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
};
TORCH_MODULE(Attention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const ModelArgs& args);
  FeedForwardImpl(int64_t dim, int64_t hidden);  // a SwiGLU of its own width (MoE's shared experts)
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
  const ModuleHooks* hooks = nullptr;  // as AttentionImpl's
};
TORCH_MODULE(FeedForward);

class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t layer_id, const ModelArgs& args);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, KVCacheSlot* cache = nullptr);
  int64_t layer_id;
  // The model's hooks, through which the block calls attention and feed_forward (tensor
  // parallelism gathers and scatters their inputs and outputs there); null: plain calls.
  const ModuleHooks* hooks = nullptr;
  Attention attention{nullptr};                // null under latent attention
  LatentAttention latent_attention{nullptr};   // args.latent_attention(): registered as "attention"
  FeedForward feed_forward{nullptr};  // a dense layer's; null in a MoE layer
  MoE moe{nullptr};                   // a MoE layer's (args.is_moe_layer); null in a dense one
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
};
TORCH_MODULE(TransformerBlock);

// The output layer of a model with tied embeddings: logits from tok_embeddings' weight, with no
// parameter of its own, so that weight is counted, sharded and stepped once. A module, so that
// parallel/ hooks it where it hooks `output` (TP's gather and vocab-sharded logits).
class TiedHeadImpl : public torch::nn::Module {
 public:
  explicit TiedHeadImpl(torch::nn::Embedding embedding) : embedding_(std::move(embedding)) {}
  // h: (B, T, dim) -> (B, T, rows of the embedding's weight)
  torch::Tensor forward(const torch::Tensor& h) { return torch::nn::functional::linear(h, embedding_->weight); }
  const torch::Tensor& weight() const { return embedding_->weight; }

 private:
  torch::nn::Embedding embedding_;  // the model's own, not registered here
};
TORCH_MODULE(TiedHead);

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelArgs& args);
  // tokens: (B, T) int64 -> logits (B, T, vocab_size). A pipeline stage holds only some parts
  // (parallel/pipeline/stage_model.h): without tok_embeddings the input is the previous stage's
  // hidden state (B, T, dim); without norm and output the result is this stage's (B, T, dim).
  torch::Tensor forward(const torch::Tensor& tokens);
  const ModelArgs& args() const { return args_; }
  // The blocks this model holds, in layer order.
  std::vector<TransformerBlockImpl*> blocks() const;
  // h: (B, T, dim), after norm -> logits (B, T, vocab_size), through head().
  torch::Tensor logits(const torch::Tensor& h);
  // The module that computes the logits: `output`, or `tied_head` with tied embeddings
  // (args.tie_word_embeddings); null in a pipeline stage without the head.
  torch::nn::Module* head() const;
  // head()'s weight (vocab_size, dim): output's, or tok_embeddings' when tied.
  torch::Tensor head_weight() const;
  // The positions in the sequence of forward()'s T tokens, (T,) int64, for RoPE: a rank of
  // context parallelism holds two chunks of every sequence (parallel/cp/), as HF's position_ids.
  // Undefined (the default): 0 .. T-1.
  void set_token_positions(torch::Tensor positions) { token_positions_ = std::move(positions); }

  // Run around the forward of the model itself, tok_embeddings, each block (and inside it,
  // attention and feed_forward, and inside those each projection), norm and output.
  ModuleHooks hooks;

  torch::nn::Embedding tok_embeddings{nullptr};
  // Keyed by layer id, as torchtitan's ModuleDict, so a stage that drops blocks keeps the
  // unsharded names (`layers.3.attention.wq.weight`) and checkpoints need no renaming.
  torch::nn::ModuleDict layers{nullptr};
  RMSNorm norm{nullptr};
  torch::nn::Linear output{nullptr};  // null with tied embeddings
  TiedHead tied_head{nullptr};        // with tied embeddings only; not registered (no parameters)

 private:
  const RopeTables& rope_for(torch::Device device);
  // rope_for()'s rows of the forward's token positions (all of rope_for() without them).
  RopeTables rope_of_tokens(torch::Device device);
  ModelArgs args_;
  RopeTables rope_;
  torch::Tensor token_positions_;
};
TORCH_MODULE(Transformer);

// torchtitan's init: depth-scaled truncated normals for the output projections of each block,
// normal(0, 1) embeddings, dim^-0.5 output layer, unit norms. Uses the default generator.
void init_weights(TransformerImpl& model);

}  // namespace ctitan::models
