#include "ctitan/models/common/kv_cache.h"

namespace ctitan::models {

double cached_decoder_bytes(const ModelArgs& args, int64_t batch, int64_t max_len, int64_t element_size) {
  const double per_position_kv =
      double(args.cached_heads()) * double(args.qk_head_dim() + args.value_head_dim()) * double(element_size);
  const double rope = 2.0 * double(args.rope_dim() / 2) * double(sizeof(float));
  return double(args.n_layers) * double(batch) * double(max_len) * per_position_kv + double(max_len) * rope;
}

CachedDecoder::CachedDecoder(TransformerImpl& model, int64_t batch, int64_t max_len)
    : model_(model), max_len_(max_len) {
  const auto& args = model.args();
  TORCH_CHECK(max_len > 0 && max_len <= args.max_seq_len, "KV cache length ", max_len,
              " must be in [1, max_seq_len ", args.max_seq_len, "]");
  auto weight = model.tok_embeddings->weight;
  rope_ = make_rope_tables(args, weight.device(), max_len);
  auto opts = weight.options().requires_grad(false);
  for (int64_t i = 0; i < args.n_layers; ++i) {
    slots_.push_back({torch::zeros({batch, max_len, args.cached_heads(), args.qk_head_dim()}, opts),
                      torch::zeros({batch, max_len, args.cached_heads(), args.value_head_dim()}, opts), 0});
  }
}

torch::Tensor CachedDecoder::forward(const torch::Tensor& tokens) {
  int64_t T = tokens.size(1);
  TORCH_CHECK(pos_ + T <= max_len_, "KV cache full: ", pos_, " + ", T, " positions exceed its ", max_len_);
  RopeTables rope{rope_.cos.slice(0, pos_, pos_ + T), rope_.sin.slice(0, pos_, pos_ + T)};
  auto h = model_.tok_embeddings(tokens);  // (B, T, dim)
  size_t layer = 0;
  for (auto* block : model_.blocks()) {
    auto& slot = slots_[layer++];
    slot.start = pos_;
    h = block->forward(h, rope, &slot);
  }
  pos_ += T;
  return model_.logits(model_.norm(h));  // (B, T, vocab)
}

}  // namespace ctitan::models
