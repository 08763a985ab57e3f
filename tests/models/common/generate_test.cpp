// KV-cached decoding against the model's own full forward, and the sampling rules.
#include "ctitan/models/common/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "ctitan/common/error.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/models/common/kv_cache.h"

namespace ctitan::models {
namespace {

// GQA (2 kv heads for 4) so the cache's head sharing is exercised.
Transformer tiny_model(int64_t vocab = 50) {
  ModelArgs args;
  args.dim = 64; args.n_layers = 2; args.n_heads = 4; args.n_kv_heads = 2; args.vocab_size = vocab;
  args.multiple_of = 32; args.max_seq_len = 32; args.rope_theta = 10000;
  torch::manual_seed(5);
  Transformer model(args);
  init_weights(*model);
  return model;
}

// fp32 logits of order 1-10; the cached path multiplies different shapes (1 query row vs T),
// so BLAS sums in another order: 1e-4 absolute is ~1e3 fp32 ulps of headroom, far below the
// O(1) error a wrong position, mask or cache slot makes.
constexpr double kAtol = 1e-4;

TEST(KvCache, CachedLogitsEqualFullForward) {
  auto model = tiny_model();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 50, {2, 13}, torch::kLong);
  auto full = model->forward(tokens);  // (2, 13, 50)

  // Prefill 5 positions, then one position at a time, then a 3-position chunk.
  CachedDecoder decoder(*model, 2, 13);
  std::vector<torch::Tensor> pieces{decoder.forward(tokens.slice(1, 0, 5))};
  for (int64_t t = 5; t < 10; ++t) pieces.push_back(decoder.forward(tokens.slice(1, t, t + 1)));
  pieces.push_back(decoder.forward(tokens.slice(1, 10, 13)));
  auto cached = torch::cat(pieces, 1);
  EXPECT_EQ(decoder.position(), 13);
  double max_err = (cached - full).abs().max().item<double>();
  EXPECT_LT(max_err, kAtol);
  EXPECT_GT(full.abs().max().item<double>(), 0.1);  // non-trivial logits
  EXPECT_THROW(decoder.forward(tokens.slice(1, 0, 1)), c10::Error);  // full cache
}

// The uncached reference: the whole sequence through model->forward for every new token.
std::vector<int64_t> greedy_by_full_forward(TransformerImpl& model, std::vector<int64_t> ids, int64_t n) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    auto logits = model.forward(torch::tensor(ids, torch::kLong).view({1, -1}));
    ids.push_back(logits[0][-1].argmax().item<int64_t>());
    out.push_back(ids.back());
  }
  return out;
}

TEST(Generate, GreedyMatchesFullForwardAndIsDeterministic) {
  auto model = tiny_model();
  SamplingOptions greedy;
  greedy.max_new_tokens = 20;
  std::vector<int64_t> prompt{3, 1, 4, 1, 5};
  auto a = generate(*model, prompt, greedy);
  ASSERT_EQ(a.size(), 20u);
  EXPECT_EQ(a, greedy_by_full_forward(*model, prompt, 20));
  EXPECT_EQ(generate(*model, prompt, greedy), a);
  // top_k = 1 is greedy at any temperature.
  SamplingOptions top1 = greedy;
  top1.temperature = 5.0;
  top1.top_k = 1;
  EXPECT_EQ(generate(*model, prompt, top1), a);
}

TEST(Generate, SamplingIsReproducibleBySeed) {
  auto model = tiny_model();
  SamplingOptions opts;
  opts.max_new_tokens = 24;
  opts.temperature = 1.5;
  opts.seed = 11;
  std::vector<int64_t> prompt{7, 8};
  auto a = generate(*model, prompt, opts);
  EXPECT_EQ(generate(*model, prompt, opts), a);
  opts.seed = 12;
  EXPECT_NE(generate(*model, prompt, opts), a);  // 24 draws over 50 ids: equal by chance ~never
}

// A temperature that underflows (1e-320 is subnormal in double, 0 in float) is the greedy limit,
// not inf / inf: every draw is the largest logit.
TEST(Generate, ATinyTemperatureIsGreedyNotNan) {
  auto logits = torch::tensor({0.f, 5.f, 1.f, 4.999f, 3.f});
  SamplingOptions opts;
  opts.temperature = 1e-320;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_next(logits, opts, gen), 1);
}

TEST(Generate, TopKDrawsOnlyFromTheKMostLikely) {
  auto logits = torch::tensor({0.f, 5.f, 1.f, 4.f, 3.f});
  SamplingOptions opts;
  opts.temperature = 10.0;  // nearly flat: without top-k every id would appear
  opts.top_k = 2;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  std::set<int64_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(sample_next(logits, opts, gen));
  EXPECT_EQ(seen, (std::set<int64_t>{1, 3}));
}

TEST(Generate, StopsAtTheStopTokenAndRejectsBadPrompts) {
  auto model = tiny_model();
  SamplingOptions opts;
  opts.max_new_tokens = 10;
  auto free_run = generate(*model, {1, 2}, opts);
  opts.stop_token = free_run[3];
  auto stopped = generate(*model, {1, 2}, opts);
  auto first = std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
  EXPECT_EQ(stopped, std::vector<int64_t>(free_run.begin(), free_run.begin() + first + 1));

  opts.max_new_tokens = 31;
  EXPECT_THROW(generate(*model, {1, 2}, opts), InputError);  // 33 > max_seq_len 32
  opts.max_new_tokens = 1;
  EXPECT_THROW(generate(*model, {1, 50}, opts), InputError);
  EXPECT_THROW(generate(*model, {}, opts), InputError);
}

// The cache's size is known before it exists: cached_decoder_bytes equals what CachedDecoder
// allocates (counted by the tracking allocator), and generate() refuses, without allocating
// anything, a cache larger than the memory it is given, a figure this test sets.
TEST(Generate, RefusesAKvCacheBeyondItsMemoryBeforeAllocatingIt) {
  metrics::install_memory_tracker();
  auto model = tiny_model();
  const auto& args = model->args();
  // Worked by hand: 2 layers x 12 positions x (keys + values) x 2 kv heads x head_dim 16 x 4 bytes,
  // plus RoPE's cos and sin, 12 positions x 8 frequencies x 4 bytes each.
  const double bytes = cached_decoder_bytes(args, /*batch=*/1, /*max_len=*/12, sizeof(float));
  EXPECT_EQ(bytes, 2 * 12 * 2 * 2 * 16 * 4 + 2 * 12 * 8 * 4);
  {
    torch::NoGradGuard no_grad;
    const auto before = metrics::memory_stats().active_bytes;
    CachedDecoder decoder(*model, 1, 12);
    EXPECT_EQ(double(metrics::memory_stats().active_bytes - before), bytes);
  }

  SamplingOptions opts;
  opts.max_new_tokens = 10;  // prompt 2 + 10 = the 12 positions above
  const auto allocations = metrics::memory_stats().alloc_count;
  try {
    generate(*model, {1, 2}, opts, bytes - 1);
    ADD_FAILURE() << "a cache one byte over its memory was allocated";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--max-new-tokens 10"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("KV cache"), std::string::npos) << e.what();
  }
  EXPECT_EQ(metrics::memory_stats().alloc_count, allocations);
  EXPECT_EQ(generate(*model, {1, 2}, opts, bytes).size(), 10u);  // exactly enough memory
}

}  // namespace
}  // namespace ctitan::models
