// Context parallelism's pieces in one process: the head-tail layout (positions, shard and its
// inverse), and ring attention on thread ranks of a Gloo group against causal attention over the
// whole sequence (ops::causal_attention_reference, plain softmax), forward and backward, for
// cp 1, 2, 3 and 4, GQA, fp32 and bf16, with both rotations (allgather and the alltoall ring).
#include <gtest/gtest.h>

#include <cmath>

#include "ctitan/config/config_fields.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/ops/attention.h"
#include "ctitan/parallel/cp/attention_blocks.h"
#include "ctitan/parallel/cp/load_balance.h"
#include "ctitan/parallel/cp/ring_attention.h"
#include "support/thread_ranks.h"

namespace ctitan::context_parallel_test {
namespace {

using parallel::cp::RingAttention;
using parallel::cp::shard_positions;
using parallel::cp::shard_sequence;
using parallel::cp::unshard_sequence;

// The largest difference relative to the reference's largest magnitude.
double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
}

TEST(CpLoadBalance, EachRankHoldsTheRthEarliestAndRthLatestChunk) {
  // T = 16, cp = 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_TRUE(shard_positions(16, 0, 2).equal(torch::tensor({0, 1, 2, 3, 12, 13, 14, 15}, torch::kLong)));
  EXPECT_TRUE(shard_positions(16, 1, 2).equal(torch::tensor({4, 5, 6, 7, 8, 9, 10, 11}, torch::kLong)));
  // Every position exactly once over the ranks, for several degrees.
  for (int64_t cp : {1, 2, 3, 4}) {
    const int64_t T = 2 * cp * 5;
    std::vector<torch::Tensor> all;
    for (int64_t r = 0; r < cp; ++r) all.push_back(shard_positions(T, r, cp));
    EXPECT_TRUE(std::get<0>(torch::cat(all).sort()).equal(torch::arange(T, torch::kLong))) << "cp " << cp;
  }
}

TEST(CpLoadBalance, ShardingFollowsThePositionsAndUnshardingRestoresTheSequence) {
  auto x = torch::arange(2 * 24 * 3, torch::kFloat).reshape({2, 24, 3});  // (B, T, dim)
  for (int64_t cp : {1, 2, 3}) {
    std::vector<torch::Tensor> shards;
    for (int64_t r = 0; r < cp; ++r) {
      auto shard = shard_sequence(x, r, cp);
      EXPECT_TRUE(shard.equal(x.index_select(1, shard_positions(24, r, cp)))) << "cp " << cp << " rank " << r;
      shards.push_back(shard);
    }
    EXPECT_TRUE(unshard_sequence(shards).equal(x)) << "cp " << cp;
  }
}

TEST(CpLoadBalance, ASequenceNotCutIntoTwoChunksPerRankIsRefused) {
  EXPECT_THROW(shard_positions(30, 0, 4), c10::Error);  // 30 % 8 != 0
}

// The plain-op block kernels (CUDA's path, and CTITAN_DISABLE_FUSED=attention's) against
// PyTorch's flash kernel on the CPU: out and log-sum-exp of a causal and an unmasked block, and
// the gradients given a merged output and log-sum-exp taken from a larger key set (as the ring's
// backward gives them). Two implementations, fp32: they differ by summation order only (1e-5
// relative, as for the ring below).
TEST(CpAttentionBlocks, PlainOpsEqualTheFlashKernel) {
  using parallel::cp::BlockKernel;
  torch::manual_seed(3);
  const int64_t B = 2, H = 3, Tq = 24, D = 16;
  const double scale = 1.0 / std::sqrt(double(D));
  for (bool causal : {true, false}) {
    const int64_t Tk = causal ? Tq : 40;
    auto q = torch::randn({B, H, Tq, D}), k = torch::randn({B, H, Tk, D}), v = torch::randn({B, H, Tk, D});
    auto [flash_out, flash_lse] = parallel::cp::block_forward(q, k, v, causal, scale, BlockKernel::kAuto);
    auto [plain_out, plain_lse] = parallel::cp::block_forward(q, k, v, causal, scale, BlockKernel::kPlainOps);
    EXPECT_LT(relative_error(plain_out, flash_out), 1e-5) << "causal " << causal;
    EXPECT_LT(relative_error(plain_lse, flash_lse), 1e-5) << "causal " << causal;
    // A merged output and log-sum-exp as if 8 more keys had been seen elsewhere.
    auto extra_k = torch::randn({B, H, 8, D}), extra_v = torch::randn({B, H, 8, D});
    auto [all_out, all_lse] = parallel::cp::block_forward(q, torch::cat({extra_k, k}, 2), torch::cat({extra_v, v}, 2),
                                                          false, scale, BlockKernel::kPlainOps);
    auto dout = torch::randn({B, H, Tq, D});
    auto flash = parallel::cp::block_backward(dout, q, k, v, all_out, all_lse, causal, scale, BlockKernel::kAuto);
    auto plain = parallel::cp::block_backward(dout, q, k, v, all_out, all_lse, causal, scale, BlockKernel::kPlainOps);
    EXPECT_LT(relative_error(std::get<0>(plain), std::get<0>(flash)), 1e-5) << "dq, causal " << causal;
    EXPECT_LT(relative_error(std::get<1>(plain), std::get<1>(flash)), 1e-5) << "dk, causal " << causal;
    EXPECT_LT(relative_error(std::get<2>(plain), std::get<2>(flash)), 1e-5) << "dv, causal " << causal;
  }
}

// Whole-sequence attention, its output and the gradients of q, k, v for a fixed output gradient.
struct Reference {
  torch::Tensor out, dq, dk, dv;
};

// q (B, T, H, D), k, v (B, T, H_kv, D); dout (B, T, H * D). GQA's repeat as the model does it.
Reference whole_sequence(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& dout) {
  auto qq = q.detach().to(torch::kDouble).requires_grad_(), kk = k.detach().to(torch::kDouble).requires_grad_(),
       vv = v.detach().to(torch::kDouble).requires_grad_();
  const int64_t n_rep = q.size(2) / k.size(2);
  auto repeat = [&](const torch::Tensor& t) { return t.repeat_interleave(n_rep, 2); };
  auto out = ops::causal_attention_reference(qq, repeat(kk), repeat(vv));
  out.backward(dout.to(torch::kDouble));
  return {out.detach(), qq.grad(), kk.grad(), vv.grad()};
}

struct RingCase {
  int64_t cp, B, T, H, H_kv, D;
  torch::ScalarType dtype;
  config::CpRotateMethod method = config::CpRotateMethod::kAllGather;
};

// Runs ring attention on cp thread ranks with each rank's shard of q, k, v and dout, and puts
// the shards of the output and the gradients back in sequence order.
Reference ring(const RingCase& c, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
               const torch::Tensor& dout) {
  std::vector<torch::Tensor> outs(size_t(c.cp)), dqs(size_t(c.cp)), dks(size_t(c.cp)), dvs(size_t(c.cp));
  auto store = testing::in_memory_store();
  auto errors = testing::on_thread_ranks(int(c.cp), [&](int rank) {
    auto group = distributed::Communicator::create(store, "cp", rank, int(c.cp), std::chrono::seconds(60), "127.0.0.1");
    auto mine = [&](const torch::Tensor& t) { return shard_sequence(t, rank, c.cp).to(c.dtype).requires_grad_(); };
    auto lq = mine(q), lk = mine(k), lv = mine(v);
    RingAttention attention(group, c.method);
    auto out = attention(lq, lk, lv);  // (B, T / cp, H * D)
    out.backward(shard_sequence(dout, rank, c.cp).to(c.dtype));
    outs[size_t(rank)] = out.detach().to(torch::kDouble);
    dqs[size_t(rank)] = lq.grad().to(torch::kDouble);
    dks[size_t(rank)] = lk.grad().to(torch::kDouble);
    dvs[size_t(rank)] = lv.grad().to(torch::kDouble);
  });
  EXPECT_EQ(testing::rank_errors(errors), "");
  if (testing::rank_errors(errors) != "") return {};
  return {unshard_sequence(outs), unshard_sequence(dqs), unshard_sequence(dks), unshard_sequence(dvs)};
}


void expect_one_rotation_equals_whole_sequence(const RingCase& c, double tolerance) {
  torch::manual_seed(11);
  auto q = torch::randn({c.B, c.T, c.H, c.D}), k = torch::randn({c.B, c.T, c.H_kv, c.D}),
       v = torch::randn({c.B, c.T, c.H_kv, c.D}), dout = torch::randn({c.B, c.T, c.H * c.D});
  // The reference sees the inputs as rounded to the run's dtype, in fp64.
  auto rounded = [&](const torch::Tensor& t) { return t.to(c.dtype).to(torch::kFloat); };
  auto want = whole_sequence(rounded(q), rounded(k), rounded(v), rounded(dout));
  auto got = ring(c, q, k, v, dout);
  ASSERT_TRUE(got.out.defined());
  const std::string what = "cp " + std::to_string(c.cp) + " T " + std::to_string(c.T) + " H " + std::to_string(c.H) +
                           "/" + std::to_string(c.H_kv) + (c.dtype == torch::kBFloat16 ? " bf16 " : " fp32 ") +
                           config::name_of(c.method);
  EXPECT_LT(relative_error(got.out, want.out), tolerance) << what << " output";
  EXPECT_LT(relative_error(got.dq, want.dq), tolerance) << what << " dq";
  EXPECT_LT(relative_error(got.dk, want.dk), tolerance) << what << " dk";
  EXPECT_LT(relative_error(got.dv, want.dv), tolerance) << what << " dv";
}

void expect_ring_equals_whole_sequence(RingCase c, double tolerance) {
  for (auto method : {config::CpRotateMethod::kAllGather, config::CpRotateMethod::kAllToAll}) {
    c.method = method;
    expect_one_rotation_equals_whole_sequence(c, tolerance);
  }
}

// fp32 against an fp64 reference (whose softmax runs in fp32): the ring merges cp partial softmaxes
// through their log-sum-exps, and the flash kernel blocks the keys; both only reorder fp32 sums, so
// the error is a few fp32 ulps of the largest values (~1e-7 relative). 1e-5 leaves margin, while a
// block given the wrong mask, a chunk attended twice or a gradient sent to the wrong rank moves
// values by O(0.1) of the largest.
TEST(RingAttention, Fp32EqualsCausalAttentionOverTheWholeSequence) {
  for (int64_t cp : {1, 2, 3, 4}) expect_ring_equals_whole_sequence({cp, 2, 24 * cp, 4, 4, 16, torch::kFloat}, 1e-5);
}

// Grouped-query attention: the key/value gradients of the repeated heads sum onto their kv head.
TEST(RingAttention, GroupedQueryAttentionEqualsTheWholeSequence) {
  expect_ring_equals_whole_sequence({2, 1, 64, 8, 2, 16, torch::kFloat}, 1e-5);
  expect_ring_equals_whole_sequence({4, 1, 64, 4, 1, 8, torch::kFloat}, 1e-5);
}

// A longer sequence, where a mask off by one chunk would touch many rows.
TEST(RingAttention, LongerSequenceEqualsTheWholeSequence) {
  expect_ring_equals_whole_sequence({4, 1, 1024, 2, 2, 32, torch::kFloat}, 1e-5);
}

// bf16 inputs: the blocks compute in bf16 with fp32 softmax statistics, the merge is fp32 and the
// output is rounded to bf16 once, so the error is bf16's rounding (2^-8 = 0.4% relative) a few
// times over (the kernels' bf16 products, the gradients' sums over up to 64 rows): 2% of the
// largest value, still far below what a wrong mask or a lost chunk moves.
TEST(RingAttention, Bf16EqualsTheWholeSequenceWithinBf16Rounding) {
  expect_ring_equals_whole_sequence({2, 1, 64, 4, 2, 16, torch::kBFloat16}, 2e-2);
}

}  // namespace
}  // namespace ctitan::context_parallel_test
