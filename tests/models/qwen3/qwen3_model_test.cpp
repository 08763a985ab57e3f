// Qwen3 on the shared decoder: its flavors against Qwen's published parameter counts, QK-norm
// and head_dim apart from dim / n_heads against a direct tensor-op formulation, and tied
// embeddings. The HF side (logits and greedy ids against transformers' Qwen3ForCausalLM) is in
// tests/cli/hf_transformers_test.cpp.
#include <gtest/gtest.h>

#include "ctitan/models/common/flops.h"
#include "ctitan/models/common/parameter_shapes.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/models/model_spec.h"

namespace ctitan::models {
namespace {

// Qwen3-0.6B: 596,049,920 parameters as transformers counts them (tied: the embedding once).
// By hand: per layer q 1024x2048 + k, v 1024x1024 + o 2048x1024 + MLP 3x1024x3072 + norms 2x1024
// + QK-norms 2x128 = 15,730,944; x28 = 440,466,432; + embedding 151,936x1024 = 155,582,464 + final
// norm 1,024. Qwen3-8B (untied, 36 layers of 4096, 32/8 heads of 128, MLP 12,288): 8,190,735,360,
// the model card's "8.2B".
TEST(Qwen3Model, FlavorsHaveThePublishedParameterCounts) {
  auto small = model_flavor("qwen3", "0.6B");
  EXPECT_TRUE(small.tie_word_embeddings);
  EXPECT_EQ(small.head_dim(), 128);
  EXPECT_EQ(count_params(small).total, 596049920);
  auto m8b = model_flavor("qwen3", "8B");
  EXPECT_FALSE(m8b.tie_word_embeddings);
  EXPECT_EQ(count_params(m8b).total, 8190735360);
  for (const auto& flavor : flavor_names("qwen3")) {
    auto a = model_flavor("qwen3", flavor);
    EXPECT_TRUE(a.qk_norm) << flavor;
    EXPECT_EQ(a.rope_theta, 1e6) << flavor;
    EXPECT_EQ(a.family, "qwen3") << flavor;
  }
}

TEST(Qwen3Model, BuiltModuleHasExactlyTheParametersOfItsShape) {
  for (bool tied : {false, true}) {
    auto args = model_flavor("qwen3", "debugmodel");
    args.n_layers = 2;
    args.tie_word_embeddings = tied;
    Transformer model(args);
    std::map<std::string, std::vector<int64_t>> built;
    for (const auto& p : model->named_parameters()) built[p.key()] = p.value().sizes().vec();
    EXPECT_EQ(built, parameter_shapes(args)) << "tied " << tied;
    EXPECT_TRUE(built.count("layers.1.attention.q_norm.weight"));
    EXPECT_EQ(built.count("output.weight"), tied ? 0u : 1u);
    int64_t numel = 0;
    for (const auto& p : model->parameters()) numel += p.numel();
    EXPECT_EQ(numel, count_params(args).total) << "tied " << tied;
  }
}

// One attention layer written out with tensor ops as Qwen3 defines it (norm each head of q and k
// over head_dim, then rotate, then causal softmax(q k^T / sqrt(head_dim)) v), against the module.
// Same fp32 inputs, different op order: agreement to 1e-5 of the output scale; dropping the
// QK-norm changes the output by O(1) (checked too, so the comparison can fail).
TEST(Qwen3Model, AttentionWithQkNormMatchesATensorOpReference) {
  torch::manual_seed(0);
  auto args = model_flavor("qwen3", "debugmodel");  // dim 256, 4 heads of 32, 2 kv heads
  args.max_seq_len = 16;
  Attention attention(args);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : attention->parameters()) p.copy_(torch::randn_like(p) * (p.dim() == 1 ? 0.3 : 0.1) + (p.dim() == 1 ? 1.0 : 0.0));
  }
  const int64_t B = 2, T = 7, H = 4, KV = 2, D = 32;
  auto x = torch::randn({B, T, args.dim});
  auto rope = make_rope_tables(args, torch::kCPU);
  auto ours = attention->forward(x, rope);  // (B, T, dim)

  auto rms = [&](const torch::Tensor& t, const torch::Tensor& w) {
    return t * torch::rsqrt(t.pow(2).mean(-1, true) + args.norm_eps) * w;
  };
  auto q = rms(torch::matmul(x, attention->wq->weight.t()).view({B, T, H, D}), attention->q_norm->weight);
  auto k = rms(torch::matmul(x, attention->wk->weight.t()).view({B, T, KV, D}), attention->k_norm->weight);
  auto v = torch::matmul(x, attention->wv->weight.t()).view({B, T, KV, D});
  // Adjacent pairs (2i, 2i+1) rotated by angle t * theta^(-2i/D), as complex numbers.
  auto rotate = [&](const torch::Tensor& t) {
    auto c = torch::view_as_complex(t.reshape({B, T, -1, D / 2, 2}).contiguous());
    auto angles = torch::complex(rope.cos.slice(0, 0, T), rope.sin.slice(0, 0, T));  // (T, D/2)
    return torch::view_as_real(c * angles.view({1, T, 1, D / 2})).reshape(t.sizes());
  };
  q = rotate(q).transpose(1, 2);                                             // (B, H, T, D)
  k = rotate(k).repeat_interleave(H / KV, 2).transpose(1, 2);                // (B, H, T, D)
  v = v.repeat_interleave(H / KV, 2).transpose(1, 2);
  auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(D));
  scores = scores.masked_fill(torch::ones({T, T}).triu(1).to(torch::kBool), -INFINITY);
  auto mixed = torch::matmul(scores.softmax(-1), v).transpose(1, 2).reshape({B, T, H * D});
  auto reference = torch::matmul(mixed, attention->wo->weight.t());
  double scale = reference.abs().max().item<double>();
  EXPECT_LT((ours - reference).abs().max().item<double>(), 1e-5 * scale);

  auto no_norm = Attention([&] { auto a = args; a.qk_norm = false; return a; }());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : no_norm->named_parameters()) p.value().copy_(attention->named_parameters()[p.key()]);
  }
  EXPECT_GT((no_norm->forward(x, rope) - reference).abs().max().item<double>(), 1e-2 * scale);
}

// Tied: the head multiplies by the embedding's weight; there is no output parameter.
TEST(Qwen3Model, TiedEmbeddingsServeAsTheHead) {
  torch::manual_seed(1);
  auto args = model_flavor("qwen3", "debugmodel");
  args.n_layers = 1;
  args.tie_word_embeddings = true;
  Transformer model(args);
  init_weights(*model);
  EXPECT_FALSE(model->output);
  ASSERT_TRUE(model->tied_head);
  EXPECT_EQ(model->head(), model->tied_head.ptr().get());
  auto tokens = torch::randint(0, args.vocab_size, {2, 5}, torch::kLong);
  auto logits = model->forward(tokens);  // (2, 5, vocab)
  torch::Tensor h = model->tok_embeddings(tokens);
  auto rope = make_rope_tables(args, torch::kCPU);
  h = model->blocks()[0]->forward(h, rope);
  auto expected = torch::matmul(model->norm(h), model->tok_embeddings->weight.t());
  EXPECT_TRUE(torch::allclose(logits, expected, 1e-5, 1e-5));
  // Both uses reach the one weight's gradient.
  logits.sum().backward();
  EXPECT_TRUE(model->tok_embeddings->weight.grad().defined());
}

}  // namespace
}  // namespace ctitan::models
