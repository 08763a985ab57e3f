#include "ctitan/models/common/transformer.h"

#include "ctitan/models/common/deferred_init.h"
#include "ctitan/ops/attention.h"
#include "ctitan/ops/rms_norm.h"
#include "ctitan/ops/rope.h"
#include "ctitan/ops/swiglu.h"

namespace ctitan::models {
namespace {

// Under a DeferredInitScope each module's weights go as soon as it is built (deferred_init.h).
const auto linear = bias_free_linear;

// linear(x), through the model's hooks when it has them.
torch::Tensor project(const ModuleHooks* hooks, torch::nn::Linear& linear, const torch::Tensor& x) {
  if (!hooks) return linear(x);
  return hooks->call(*linear, x, [linear = linear.ptr()](const torch::Tensor& in) { return linear->forward(in); });
}

// (B, T, n_kv_heads, head_dim) -> (B, T, n_kv_heads * n_rep, head_dim): GQA shares each kv head
// among n_rep query heads.
torch::Tensor repeat_kv(const torch::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  auto B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  return x.unsqueeze(3).expand({B, T, H, n_rep, D}).reshape({B, T, H * n_rep, D});
}

}  // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
  release_if_deferred(*this);
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // Normalises in fp32 whatever the compute dtype: the mean of squares loses too much in bf16.
  return ops::rms_norm(x, weight, eps_);
}

RopeTables make_rope_tables(const ModelArgs& args, torch::Device device, int64_t positions) {
  if (positions < 0) positions = args.max_seq_len;
  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const int64_t rotated = args.rope_dim(), half = rotated / 2;
  // (half,): theta^(-2i/rotated), rotated = head_dim (or latent attention's rope part)
  auto inv_freq = 1.0 / torch::pow(args.rope_theta, torch::arange(0, half, opts) * 2.0 / double(rotated));
  // (positions, half): angle of position t for frequency i
  auto angles = torch::outer(torch::arange(positions, opts), inv_freq);
  return {angles.cos(), angles.sin()};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope) { return ops::rope(x, rope.cos, rope.sin); }

std::pair<torch::Tensor, torch::Tensor> append_to_cache(KVCacheSlot& cache, const torch::Tensor& k,
                                                         const torch::Tensor& v) {
  const int64_t start = cache.start, end = start + k.size(1);
  cache.keys.slice(1, start, end).copy_(k);
  cache.values.slice(1, start, end).copy_(v);
  return {cache.keys.slice(1, 0, end), cache.values.slice(1, 0, end)};  // the cached positions, then x's
}

AttentionImpl::AttentionImpl(const ModelArgs& args)
    : n_heads_(args.n_heads), n_kv_heads_(args.kv_heads()), head_dim_(args.head_dim()) {
  wq = register_module("wq", linear(args.dim, n_heads_ * head_dim_));
  wk = register_module("wk", linear(args.dim, n_kv_heads_ * head_dim_));
  wv = register_module("wv", linear(args.dim, n_kv_heads_ * head_dim_));
  wo = register_module("wo", linear(n_heads_ * head_dim_, args.dim));
  if (args.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, args.norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, args.norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope, KVCacheSlot* cache) {
  auto B = x.size(0), T = x.size(1);
  // (B, T, H, D) per projection; kv have n_kv_heads heads.
  // Head counts come from the projections' widths (-1), not from args: tensor parallelism gives
  // each rank a slice of the heads by slicing wq/wk/wv, and this code stays the same.
  auto q = project(hooks, wq, x).view({B, T, -1, head_dim_});
  auto k = project(hooks, wk, x).view({B, T, -1, head_dim_});
  if (q_norm) {
    q = q_norm(q);  // over head_dim, each head alike, before RoPE as Qwen3 does
    k = k_norm(k);
  }
  q = apply_rope(q, rope);
  k = apply_rope(k, rope);
  auto v = project(hooks, wv, x).view({B, T, -1, head_dim_});
  int64_t q_start = 0;
  if (cache) {
    q_start = cache->start;
    std::tie(k, v) = append_to_cache(*cache, k, v);  // (B, S, n_kv_heads, D), S = start + T
  }
  // Causal: position p attends to positions <= p. (B, T, H*D)
  if (!cache && hooks && hooks->attention()) return project(hooks, wo, hooks->attention()(q, k, v));
  k = repeat_kv(k, n_heads_ / n_kv_heads_);
  v = repeat_kv(v, n_heads_ / n_kv_heads_);
  return project(hooks, wo, ops::causal_attention(q, k, v, q_start));
}

FeedForwardImpl::FeedForwardImpl(const ModelArgs& args) : FeedForwardImpl(args.dim, args.ffn_hidden_dim()) {}

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden) {
  w1 = register_module("w1", linear(dim, hidden));
  w2 = register_module("w2", linear(hidden, dim));
  w3 = register_module("w3", linear(dim, hidden));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  // w1 before w3, written out: as arguments of one call their order would be the compiler's, and
  // op selective AC's every-other-matmul policy counts them in order.
  auto gate = project(hooks, w1, x);
  auto up = project(hooks, w3, x);
  return project(hooks, w2, ops::swiglu(gate, up));
}

TransformerBlockImpl::TransformerBlockImpl(int64_t id, const ModelArgs& args) : layer_id(id) {
  if (args.latent_attention()) {
    latent_attention = register_module("attention", LatentAttention(args));
  } else {
    attention = register_module("attention", Attention(args));
  }
  if (args.is_moe_layer(id)) {
    moe = register_module("moe", MoE(args));
  } else {
    feed_forward = register_module("feed_forward", FeedForward(args));
  }
  attention_norm = register_module("attention_norm", RMSNorm(args.dim, args.norm_eps));
  ffn_norm = register_module("ffn_norm", RMSNorm(args.dim, args.norm_eps));
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const RopeTables& rope, KVCacheSlot* cache) {
  auto attend = [&](const torch::Tensor& in) {
    return attention ? attention(in, rope, cache) : latent_attention(in, rope, cache);
  };
  const torch::nn::Module& attention_module =
      attention ? static_cast<torch::nn::Module&>(*attention) : *latent_attention;
  auto h = x + (hooks ? hooks->call(attention_module, attention_norm(x), attend) : attend(attention_norm(x)));
  auto ffn = [&](const torch::Tensor& in) { return moe ? moe(in) : feed_forward(in); };
  const torch::nn::Module& ffn_module = moe ? static_cast<torch::nn::Module&>(*moe) : *feed_forward;
  return h + (hooks ? hooks->call(ffn_module, ffn_norm(h), ffn) : ffn(ffn_norm(h)));
}

TransformerImpl::TransformerImpl(const ModelArgs& args) : args_(args) {
  tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(args.vocab_size, args.dim));
  release_if_deferred(*tok_embeddings);
  layers = register_module("layers", torch::nn::ModuleDict());
  for (int64_t i = 0; i < args.n_layers; ++i) {
    auto block = TransformerBlock(i, args);
    layers->update({{std::to_string(i), block.ptr()}});
    block->hooks = &hooks;
    if (block->attention) block->attention->hooks = &hooks;
    if (block->feed_forward) block->feed_forward->hooks = &hooks;
    if (block->moe) block->moe->hooks = &hooks;
  }
  norm = register_module("norm", RMSNorm(args.dim, args.norm_eps));
  if (args.tie_word_embeddings) {
    tied_head = TiedHead(tok_embeddings);
  } else {
    output = register_module("output", linear(args.dim, args.vocab_size));
  }
}

torch::nn::Module* TransformerImpl::head() const {
  if (output) return output.ptr().get();
  return tied_head ? tied_head.ptr().get() : nullptr;
}

torch::Tensor TransformerImpl::head_weight() const { return output ? output->weight : tied_head->weight(); }

torch::Tensor TransformerImpl::logits(const torch::Tensor& h) {
  auto* module = head();
  TORCH_CHECK(module, "a model part without the output layer has no logits");
  return hooks.call(*module, h, [&](const torch::Tensor& x) { return output ? output(x) : tied_head(x); });
}

const RopeTables& TransformerImpl::rope_for(torch::Device device) {
  if (!rope_.cos.defined() || rope_.cos.device() != device) rope_ = make_rope_tables(args_, device);
  return rope_;
}

RopeTables TransformerImpl::rope_of_tokens(torch::Device device) {
  const auto& rope = rope_for(device);
  if (!token_positions_.defined()) return rope;  // ops::rope reads the first T rows
  // Moved once, not in every forward (a CUDA copy from pageable memory would wait for the host).
  if (token_positions_.device() != device) token_positions_ = token_positions_.to(device);
  return {rope.cos.index_select(0, token_positions_), rope.sin.index_select(0, token_positions_)};  // each (T, head_dim/2)
}

std::vector<TransformerBlockImpl*> TransformerImpl::blocks() const {
  std::vector<TransformerBlockImpl*> out;
  out.reserve(layers->size());
  for (const auto& item : *layers) out.push_back(item.value()->as<TransformerBlock>());
  return out;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.size(1) <= args_.max_seq_len, "sequence length ", tokens.size(1),
              " exceeds the model's max_seq_len ", args_.max_seq_len);
  TORCH_CHECK(!token_positions_.defined() || tokens.dim() != 2 || tokens.size(1) == token_positions_.numel(),
              "the model's token positions cover ", token_positions_.numel(), " tokens, the input has ", tokens.size(1));
  return hooks.call(*this, tokens, [&](const torch::Tensor& input) {
    auto h = input;  // (B, T, dim) when this stage starts after the embeddings
    if (tok_embeddings) {
      h = hooks.call(*tok_embeddings, input, [&](const torch::Tensor& x) { return tok_embeddings(x); });  // (B, T, dim)
    }
    // Attention sees the forward's whole sequence (sequence-parallel TP gathers it first), so
    // the rows are those of the input's tokens, whatever the blocks' input holds.
    const auto rope = rope_of_tokens(h.device());
    for (auto* block : blocks()) {
      // By value: a hook may run the block again during backward, after this forward returned.
      h = hooks.call(*block, h, [block, rope](const torch::Tensor& x) { return block->forward(x, rope); });
    }
    if (norm) h = hooks.call(*norm, h, [&](const torch::Tensor& x) { return norm(x); });
    if (head()) h = logits(h);  // (B, T, vocab_size)
    return h;
  });
}

}  // namespace ctitan::models
