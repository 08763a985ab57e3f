#pragma once
// Autoregressive sampling on top of CachedDecoder: greedy at temperature 0, else softmax at
// `temperature` over the top-k logits, drawn from a generator seeded with `seed`.
#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "ctitan/models/common/transformer.h"

namespace ctitan::models {

struct SamplingOptions {
  int64_t max_new_tokens = 32;
  double temperature = 0.0;           // 0 = greedy (argmax)
  int64_t top_k = 0;                  // keep the k most likely tokens; 0 = all
  uint64_t seed = 0;                  // seeds the sampling generator, so a run is reproducible
  std::optional<int64_t> stop_token;  // stop after emitting this id (e.g. EOS)
};

// Returns only the new ids (at most max_new_tokens). Throws InputError if the prompt is empty,
// holds an id outside the vocabulary, prompt + new tokens exceed the model's max_seq_len, or
// their KV cache (cached_decoder_bytes) would need more than `cache_memory_bytes`: checked
// before anything is allocated.
std::vector<int64_t> generate(TransformerImpl& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                              double cache_memory_bytes = std::numeric_limits<double>::infinity());

// The next id from one row of logits (vocab,), as generate() picks it.
int64_t sample_next(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

}  // namespace ctitan::models
