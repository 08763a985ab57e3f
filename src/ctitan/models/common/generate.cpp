#include "ctitan/models/common/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>

#include "ctitan/common/byte_units.h"
#include "ctitan/common/error.h"
#include "ctitan/models/common/kv_cache.h"

namespace ctitan::models {

int64_t sample_next(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator) {
  auto l = logits.to(torch::kFloat);  // (vocab,)
  if (options.temperature <= 0) return l.argmax().item<int64_t>();
  // Shifted so that the largest logit is 0, and divided in double (a subnormal temperature is 0 as
  // a float): a temperature however small sends the others to -inf, never the largest to +inf or
  // NaN; the greedy limit.
  l = ((l - l.max()).to(torch::kDouble) / options.temperature).to(torch::kFloat);
  if (options.top_k > 0 && options.top_k < l.size(0)) {
    // Everything below the k-th largest logit gets probability 0.
    auto kth = std::get<0>(l.topk(options.top_k)).min();
    l = l.masked_fill(l < kth, -std::numeric_limits<float>::infinity());
  }
  auto probs = torch::softmax(l, -1);
  return at::multinomial(probs, 1, /*replacement=*/false, generator).item<int64_t>();
}

std::vector<int64_t> generate(TransformerImpl& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                              double cache_memory_bytes) {
  const auto& args = model.args();
  if (prompt.empty()) throw InputError("generate: the prompt is empty");
  for (auto id : prompt) {
    if (id < 0 || id >= args.vocab_size) {
      throw InputError(fmt::format("generate: prompt id {} is outside the vocabulary [0, {})", id, args.vocab_size));
    }
  }
  // Compared as a difference: the sum of a huge --max-new-tokens and the prompt would overflow.
  if (options.max_new_tokens > args.max_seq_len - int64_t(prompt.size())) {
    throw InputError(fmt::format("generate: prompt ({} tokens) + --max-new-tokens {} exceed the model's "
                                 "max_seq_len {}", prompt.size(), options.max_new_tokens, args.max_seq_len));
  }
  if (options.max_new_tokens <= 0) return {};
  const int64_t total = int64_t(prompt.size()) + options.max_new_tokens;
  const auto element_size = int64_t(model.tok_embeddings->weight.element_size());
  const double cache_bytes = cached_decoder_bytes(args, /*batch=*/1, total, element_size);
  if (cache_bytes > cache_memory_bytes) {
    throw InputError(fmt::format("generate: the KV cache for prompt ({} tokens) + --max-new-tokens {} needs {:.3f} GiB, "
                                 "more than the {:.3f} GiB of memory left for it: lower --max-new-tokens",
                                 prompt.size(), options.max_new_tokens, cache_bytes / kGiB,
                                 std::max(cache_memory_bytes, 0.0) / kGiB));
  }

  torch::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  auto device = model.tok_embeddings->weight.device();
  CachedDecoder decoder(model, /*batch=*/1, total);
  // Prefill: the whole prompt in one forward; its last position predicts the first new token.
  auto logits = decoder.forward(torch::tensor(prompt, torch::kLong).view({1, -1}).to(device));
  std::vector<int64_t> out;
  while (true) {
    auto next = sample_next(logits[0][-1], options, generator);
    out.push_back(next);
    if (int64_t(out.size()) == options.max_new_tokens || (options.stop_token && next == *options.stop_token)) break;
    logits = decoder.forward(torch::tensor({next}, torch::kLong).view({1, 1}).to(device));
  }
  return out;
}

}  // namespace ctitan::models
