#include "ctitan/models/llama/kv_cache.h"

#include <cmath>
#include <limits>

namespace ctitan::models::llama {

CachedDecoder::CachedDecoder(TransformerImpl& model, int64_t batch, int64_t max_len)
    : model_(model), max_len_(max_len) {
  const auto& args = model.args();
  TORCH_CHECK(max_len > 0 && max_len <= args.max_seq_len, "KV cache length ", max_len,
              " must be in [1, max_seq_len ", args.max_seq_len, "]");
  auto weight = model.tok_embeddings->weight;
  rope_ = make_rope_tables(args, weight.device());
  auto opts = weight.options().requires_grad(false);
  for (int64_t i = 0; i < args.n_layers; ++i) {
    keys_.push_back(torch::zeros({batch, max_len, args.kv_heads(), args.head_dim()}, opts));
    values_.push_back(torch::zeros({batch, max_len, args.kv_heads(), args.head_dim()}, opts));
  }
}

torch::Tensor CachedDecoder::attention(TransformerBlockImpl& block, int64_t layer, const torch::Tensor& x,
                                       const RopeTables& rope) {
  const auto& args = model_.args();
  auto& attn = *block.attention;
  int64_t B = x.size(0), T = x.size(1), H = args.n_heads, Hkv = args.kv_heads(), D = args.head_dim();
  int64_t end = pos_ + T;
  // (B, T, H, D); the rope tables passed in start at position pos_.
  auto q = apply_rope(attn.wq(x).view({B, T, H, D}), rope);
  keys_[size_t(layer)].slice(1, pos_, end).copy_(apply_rope(attn.wk(x).view({B, T, Hkv, D}), rope));
  values_[size_t(layer)].slice(1, pos_, end).copy_(attn.wv(x).view({B, T, Hkv, D}));
  // (B, S, Hkv, D) with S = end cached positions -> (B, S, H, D): each kv head serves H/Hkv query heads.
  auto k = keys_[size_t(layer)].slice(1, 0, end).repeat_interleave(H / Hkv, /*dim=*/2);
  auto v = values_[size_t(layer)].slice(1, 0, end).repeat_interleave(H / Hkv, /*dim=*/2);
  // (B, H, T, D) x (B, H, D, S) -> (B, H, T, S)
  auto scores = torch::matmul(q.transpose(1, 2), k.permute({0, 2, 3, 1})) * (1.0 / std::sqrt(double(D)));
  // Query i sits at position pos_ + i and sees keys j <= pos_ + i.
  auto mask = torch::full({T, end}, -std::numeric_limits<float>::infinity(), scores.options().dtype(torch::kFloat))
                  .triu(pos_ + 1);
  auto probs = torch::softmax(scores.to(torch::kFloat) + mask, -1).to(q.scalar_type());
  // (B, H, T, S) x (B, H, S, D) -> (B, H, T, D) -> (B, T, H*D)
  auto out = torch::matmul(probs, v.transpose(1, 2)).transpose(1, 2).reshape({B, T, H * D});
  return attn.wo(out);
}

torch::Tensor CachedDecoder::forward(const torch::Tensor& tokens) {
  int64_t T = tokens.size(1);
  TORCH_CHECK(pos_ + T <= max_len_, "KV cache full: ", pos_, " + ", T, " positions exceed its ", max_len_);
  RopeTables rope{rope_.cos.slice(0, pos_, pos_ + T), rope_.sin.slice(0, pos_, pos_ + T)};
  auto h = model_.tok_embeddings(tokens);  // (B, T, dim)
  int64_t layer = 0;
  for (const auto& module : *model_.layers) {
    auto& block = *module->as<TransformerBlock>();
    h = h + attention(block, layer++, block.attention_norm(h), rope);
    h = h + block.feed_forward(block.ffn_norm(h));
  }
  pos_ += T;
  return model_.output(model_.norm(h));  // (B, T, vocab)
}

}  // namespace ctitan::models::llama
