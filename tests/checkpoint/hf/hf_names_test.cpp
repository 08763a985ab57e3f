// Name mapping and the q/k row permutation, checked against HF's rotate-half RoPE written out here.
#include "ctitan/checkpoint/hf/hf_names.h"

#include <gtest/gtest.h>

#include "ctitan/checkpoint/hf/hf_config.h"
#include "ctitan/common/error.h"
#include "ctitan/models/common/parameter_shapes.h"
#include "ctitan/models/common/transformer.h"

namespace ctitan::checkpoint::hf {
namespace {

TEST(HfNames, MapsTorchtitanNamesToLlamaForCausalLM) {
  EXPECT_EQ(to_hf_name("tok_embeddings.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(to_hf_name("layers.3.attention.wq.weight"), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(to_hf_name("layers.0.attention.wo.weight"), "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(to_hf_name("layers.12.feed_forward.w1.weight"), "model.layers.12.mlp.gate_proj.weight");
  EXPECT_EQ(to_hf_name("layers.12.feed_forward.w3.weight"), "model.layers.12.mlp.up_proj.weight");
  EXPECT_EQ(to_hf_name("layers.12.feed_forward.w2.weight"), "model.layers.12.mlp.down_proj.weight");
  EXPECT_EQ(to_hf_name("layers.1.attention_norm.weight"), "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(to_hf_name("layers.1.ffn_norm.weight"), "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(to_hf_name("norm.weight"), "model.norm.weight");
  EXPECT_EQ(to_hf_name("output.weight"), "lm_head.weight");
}

TEST(HfNames, EveryParameterNameRoundTrips) {
  models::ModelArgs args;
  args.dim = 32; args.n_layers = 3; args.n_heads = 4; args.vocab_size = 10; args.qk_norm = true;
  for (const auto& [fqn, _] : models::parameter_shapes(args)) EXPECT_EQ(from_hf_name(to_hf_name(fqn), "f"), fqn);
}

TEST(HfNames, UnknownNamesAreInputErrors) {
  EXPECT_THROW(to_hf_name("layers.0.attention.wqkv.weight"), InputError);
  EXPECT_THROW(to_hf_name("model.embed_tokens.weight"), InputError);
  try {
    from_hf_name("model.layers.0.self_attn.q_proj.bias", "shard.safetensors");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("shard.safetensors"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("q_proj.bias"), std::string::npos);
  }
}

TEST(HfRope, PermutationIsExactlyInvertible) {
  torch::manual_seed(1);
  auto w = torch::randn({4 * 8, 16});
  EXPECT_FALSE(torch::equal(permute_rows_to_hf(w, 4), w));
  EXPECT_TRUE(torch::equal(permute_rows_from_hf(permute_rows_to_hf(w, 4), 4), w));
  EXPECT_TRUE(torch::equal(permute_rows_to_hf(permute_rows_from_hf(w, 4), 4), w));
}

// HF's LlamaRotaryEmbedding + apply_rotary_pos_emb: cos/sin repeated over both halves,
// rotate_half(x) = cat(-x[D/2:], x[:D/2]). x: (B, T, H, D).
torch::Tensor hf_rope(const torch::Tensor& x, const models::RopeTables& rope) {
  auto T = x.size(1), half = x.size(3) / 2;
  auto cos = torch::cat({rope.cos, rope.cos}, -1).slice(0, 0, T).view({1, T, 1, 2 * half});
  auto sin = torch::cat({rope.sin, rope.sin}, -1).slice(0, 0, T).view({1, T, 1, 2 * half});
  auto rotated = torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

// The property the permutation exists for: HF's attention scores on permuted weights equal
// ours on the original weights, for every head and position pair.
TEST(HfRope, HfRotateHalfOnPermutedWeightsGivesOurScores) {
  torch::manual_seed(2);
  models::ModelArgs args;
  args.dim = 64; args.n_heads = 4; args.n_kv_heads = 2; args.max_seq_len = 16; args.rope_theta = 10000;
  int64_t B = 2, T = 9, D = args.head_dim();
  auto rope = models::make_rope_tables(args, torch::kCPU);
  auto x = torch::randn({B, T, args.dim});
  auto wq = torch::randn({args.n_heads * D, args.dim}), wk = torch::randn({args.kv_heads() * D, args.dim});

  auto q = models::apply_rope(torch::matmul(x, wq.t()).view({B, T, args.n_heads, D}), rope);
  auto k = models::apply_rope(torch::matmul(x, wk.t()).view({B, T, args.kv_heads(), D}), rope);
  auto q_hf = hf_rope(torch::matmul(x, permute_rows_to_hf(wq, args.n_heads).t()).view({B, T, args.n_heads, D}), rope);
  auto k_hf = hf_rope(torch::matmul(x, permute_rows_to_hf(wk, args.kv_heads()).t()).view({B, T, args.kv_heads(), D}), rope);

  // (B, H, T, T) scores of query head h against kv head h / 2.
  auto scores = [](const torch::Tensor& q, const torch::Tensor& k) {
    auto kk = k.repeat_interleave(2, 2);
    return torch::matmul(q.transpose(1, 2), kk.permute({0, 2, 3, 1}));
  };
  auto ours = scores(q, k), theirs = scores(q_hf, k_hf);
  // fp32 dot products of length 16 over values of size ~64: 1e-3 absolute is ~1e-6 relative.
  EXPECT_TRUE(torch::allclose(ours, theirs, /*rtol=*/1e-5, /*atol=*/1e-3))
      << (ours - theirs).abs().max().item<float>();
  // And without the permutation they differ: the test can fail.
  auto q_wrong = hf_rope(torch::matmul(x, wq.t()).view({B, T, args.n_heads, D}), rope);
  EXPECT_FALSE(torch::allclose(scores(q_wrong, k_hf), ours, 1e-5, 1e-3));
}

}  // namespace
}  // namespace ctitan::checkpoint::hf
