#include "ctitan/models/common/transformer.h"

#include <gtest/gtest.h>

#include "ctitan/models/common/flops.h"
#include "ctitan/models/model_spec.h"

namespace ctitan::models {
namespace {

ModelArgs tiny_args() {
  ModelArgs a;
  a.dim = 32; a.n_layers = 2; a.n_heads = 4; a.n_kv_heads = 2; a.vocab_size = 50; a.multiple_of = 16;
  a.max_seq_len = 16;
  return a;
}

TEST(LlamaModel, ParameterNamesMatchTorchtitan) {
  Transformer model(model_flavor("llama3", "debugmodel"));
  std::set<std::string> names;
  for (const auto& p : model->named_parameters()) names.insert(p.key());
  for (auto name : {"tok_embeddings.weight", "layers.3.attention.wq.weight", "layers.3.attention.wk.weight",
                    "layers.3.attention.wv.weight", "layers.3.attention.wo.weight",
                    "layers.5.feed_forward.w1.weight", "layers.5.feed_forward.w2.weight",
                    "layers.5.feed_forward.w3.weight", "layers.0.attention_norm.weight",
                    "layers.0.ffn_norm.weight", "norm.weight", "output.weight"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_EQ(names.size(), 2 + 6 * 9 + 1);
}

// Debug model by hand: per block 4·256² (attention) + 3·256·768 (FFN) + 2·256 (norms) = 852,480;
// six blocks 5,114,880; final norm 256; output 256·2048 = 524,288; embedding 524,288.
TEST(LlamaModel, ParamCountsByHandAndAgainstTheModule) {
  auto args = model_flavor("llama3", "debugmodel");
  EXPECT_EQ(args.ffn_hidden_dim(), 768);
  auto count = count_params(args);
  EXPECT_EQ(count.embedding, 524288);
  EXPECT_EQ(count.total, 5114880 + 256 + 524288 + 524288);
  int64_t numel = 0;
  for (const auto& p : Transformer(args)->parameters()) numel += p.numel();
  EXPECT_EQ(count.total, numel);
  // Llama 3 8B has 8,030,261,248 parameters (Meta's model card figure of "8.03B").
  EXPECT_EQ(count_params(model_flavor("llama3", "8B")).total, 8030261248);
  EXPECT_EQ(model_flavor("llama3", "8B").ffn_hidden_dim(), 14336);
  EXPECT_EQ(model_flavor("llama3", "70B").ffn_hidden_dim(), 28672);
  EXPECT_EQ(model_flavor("llama3", "405B").ffn_hidden_dim(), 53248);
}

// 6 · 5,639,424 (non-embedding) + 12 · 6 layers · 16 heads · 16 head_dim · 2048 tokens.
TEST(LlamaModel, FlopsPerTokenIsTorchtitansFormula) {
  EXPECT_DOUBLE_EQ(flops_per_token(model_flavor("llama3", "debugmodel"), 2048), 6.0 * 5639424 + 12.0 * 6 * 16 * 16 * 2048);
}

TEST(LlamaModel, ForwardShapeAndGqaProjections) {
  Transformer model(tiny_args());
  init_weights(*model);
  auto tokens = torch::randint(0, 50, {3, 10}, torch::kLong);
  EXPECT_EQ(model->forward(tokens).sizes(), (std::vector<int64_t>{3, 10, 50}));
  auto* block = model->blocks()[0];
  EXPECT_EQ(block->attention->wk->weight.sizes(), (std::vector<int64_t>{2 * 8, 32}));  // 2 kv heads × head_dim 8
}

TEST(LlamaModel, IsCausal) {
  torch::manual_seed(0);
  Transformer model(tiny_args());
  init_weights(*model);
  auto tokens = torch::randint(0, 50, {1, 8}, torch::kLong);
  auto changed = tokens.clone();
  changed[0][7] = (tokens[0][7].item<int64_t>() + 1) % 50;
  auto a = model->forward(tokens), b = model->forward(changed);
  // Positions 0..6 cannot see token 7: bitwise equal. Position 7 must change.
  EXPECT_TRUE(torch::equal(a.slice(1, 0, 7), b.slice(1, 0, 7)));
  EXPECT_FALSE(torch::equal(a.slice(1, 7, 8), b.slice(1, 7, 8)));
}

// Meta's reference rotates (x[2i], x[2i+1]) as the complex number x[2i] + i·x[2i+1] by angle
// t·theta^(-2i/d). Recompute that with torch's complex arithmetic and compare.
TEST(LlamaModel, RopeMatchesComplexReference) {
  auto args = tiny_args();
  auto rope = make_rope_tables(args, torch::kCPU);
  auto x = torch::randn({2, 6, 4, 8});
  auto half = 4;
  auto inv_freq = 1.0 / torch::pow(args.rope_theta, torch::arange(0, half, torch::kFloat) * 2.0 / 8);
  auto angles = torch::outer(torch::arange(6, torch::kFloat), inv_freq);  // (T, D/2)
  auto rotation = torch::polar(torch::ones_like(angles), angles).view({1, 6, 1, half});
  auto expected = torch::view_as_real(torch::view_as_complex(x.view({2, 6, 4, half, 2})) * rotation).view({2, 6, 4, 8});
  EXPECT_TRUE(torch::allclose(apply_rope(x, rope), expected, /*rtol=*/1e-6, /*atol=*/1e-6));
}

TEST(LlamaModel, InitFollowsTorchtitan) {
  torch::manual_seed(0);
  auto args = model_flavor("llama3", "debugmodel");
  Transformer model(args);
  init_weights(*model);
  auto std_of = [](const torch::Tensor& t) { return t.std().item<double>(); };
  EXPECT_NEAR(std_of(model->tok_embeddings->weight), 1.0, 0.01);
  auto* block = model->blocks()[5];
  EXPECT_NEAR(std_of(block->attention->wq->weight), 0.02, 0.001);
  EXPECT_NEAR(std_of(block->attention->wo->weight), 0.02 / std::sqrt(12.0), 0.0005);  // depth init, layer 5
  auto out = model->output->weight;
  double out_std = 1.0 / 16;  // dim^-0.5
  EXPECT_LE(out.abs().max().item<double>(), 3 * out_std + 1e-7);  // truncated at 3 std
  EXPECT_TRUE(torch::all(model->norm->weight == 1).item<bool>());
}

}  // namespace
}  // namespace ctitan::models
