#pragma once
// Incremental decoding with a key/value cache: each new token attends to the cached keys and
// values of the tokens before it, so generating n tokens costs n single-position forwards
// instead of n ever-longer full forwards. Runs the model's own modules and weights (norms,
// Linear projections, apply_rope); only attention's bookkeeping is reimplemented here, so that
// model.{h,cpp} stays the training path.
#include <torch/torch.h>

#include <vector>

#include "ctitan/models/llama/model.h"

namespace ctitan::models::llama {

class CachedDecoder {
 public:
  // Caches up to `max_len` positions (<= the model's max_seq_len) for `batch` sequences, in the
  // dtype of the model's weights.
  CachedDecoder(TransformerImpl& model, int64_t batch, int64_t max_len);

  // tokens: (B, T) int64 at positions [position(), position() + T) -> logits (B, T, vocab).
  // Appends their keys and values to the cache. Call under torch::NoGradGuard.
  torch::Tensor forward(const torch::Tensor& tokens);

  int64_t position() const { return pos_; }
  int64_t capacity() const { return max_len_; }

 private:
  torch::Tensor attention(TransformerBlockImpl& block, int64_t layer, const torch::Tensor& x, const RopeTables& rope);

  TransformerImpl& model_;
  int64_t max_len_, pos_ = 0;
  RopeTables rope_;
  // Per layer: (B, max_len, n_kv_heads, head_dim); positions [0, pos_) are filled.
  std::vector<torch::Tensor> keys_, values_;
};

}  // namespace ctitan::models::llama
