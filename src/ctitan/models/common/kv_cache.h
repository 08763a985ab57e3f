#pragma once
// Incremental decoding with a key/value cache: each new token attends to the cached keys and
// values of the tokens before it, so generating n tokens costs n single-position forwards
// instead of n ever-longer full forwards. Runs the model's own blocks, each attention layer given
// its KVCacheSlot (model.h); this class only owns the cache and the position.
#include <torch/torch.h>

#include <vector>

#include "ctitan/models/common/transformer.h"

namespace ctitan::models {

// Bytes a CachedDecoder(model, batch, max_len) allocates: every layer's keys and values,
// (batch, max_len, kv_heads, head_dim) each in `element_size`-byte elements, and its fp32 RoPE
// tables (max_len, head_dim/2) x 2. In double, so that any sizes compare without overflow.
double cached_decoder_bytes(const ModelArgs& args, int64_t batch, int64_t max_len, int64_t element_size);

class CachedDecoder {
 public:
  // Caches up to `max_len` positions (<= the model's max_seq_len) for `batch` sequences, in the
  // dtype of the model's weights.
  CachedDecoder(TransformerImpl& model, int64_t batch, int64_t max_len);

  // tokens: (B, T) int64 at positions [position(), position() + T) -> logits (B, T, vocab).
  // Appends their keys and values to the cache. Call under torch::NoGradGuard.
  torch::Tensor forward(const torch::Tensor& tokens);

  int64_t position() const { return pos_; }

 private:
  TransformerImpl& model_;
  int64_t max_len_, pos_ = 0;
  RopeTables rope_;
  std::vector<KVCacheSlot> slots_;  // one per layer; positions [0, pos_) are filled
};

}  // namespace ctitan::models
