// What FSDP holds, and when it lets go, counted by the memory tracker's tags against references
// computed from the model's shapes. One rank, so that the process-wide counters see one FSDP
// (thread ranks would add two ranks' buffers in an order that depends on timing); with one rank a
// group's gather buffer and its reduce-scatter input (N x S) hold exactly its parameters' bytes.
// Every group is at least 512 KiB, which Gloo gathers with one broadcast per rank straight into
// FSDP's buffer (distributed/gloo_backend.cpp); smaller ones go through a staging buffer that
// Gloo's thread frees when it likes, which would make the counts depend on timing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "ctitan/distributed/communicator.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/parallel/fsdp_plan.h"
#include "support/thread_ranks.h"

namespace ctitan::parallel {
namespace {

using metrics::MemoryTag;

int64_t tagged(const metrics::MemoryStats& s, MemoryTag tag) { return s.tagged_bytes[size_t(tag)]; }
int64_t tagged_total(const metrics::MemoryStats& s) {
  return std::accumulate(s.tagged_bytes.begin(), s.tagged_bytes.end(), int64_t(0));
}

models::ModelArgs fsdp_tiny_args() {
  models::ModelArgs args;
  args.dim = 128;  // blocks of 721 KiB
  args.n_layers = 3;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 2048;  // tok_embeddings 1 MiB, [norm, output] 1 MiB + 512 B
  args.multiple_of = 32;
  args.max_seq_len = 16;
  return args;
}

int64_t parameter_bytes(const torch::nn::Module& module) {
  int64_t bytes = 0;
  for (const auto& p : module.parameters()) bytes += p.numel() * int64_t(p.element_size());
  return bytes;
}

// One rank's FSDP over a seeded tiny model, and the fp32 bytes of each group in apply_fsdp's
// order: tok_embeddings, layers.0 .. layers.2, [norm, output].
struct OneRankFsdp {
  std::shared_ptr<distributed::Communicator> group;
  models::Transformer model{nullptr};
  std::vector<int64_t> group_bytes;
  std::unique_ptr<fsdp::FSDPModule> fsdp;

  // `before_fsdp` registers hooks that must run inside FSDP's (see ProbeAtBackward).
  explicit OneRankFsdp(const std::function<void(models::TransformerImpl&)>& before_fsdp = {}) {
    metrics::install_memory_tracker();
    group = distributed::Communicator::create(testing::in_memory_store(), "dp", 0, 1, std::chrono::seconds(60),
                                              "127.0.0.1");
    torch::manual_seed(3);
    model = models::Transformer(fsdp_tiny_args());
    models::init_weights(*model);
    group_bytes.push_back(parameter_bytes(*model->tok_embeddings));
    for (auto* block : model->blocks()) group_bytes.push_back(parameter_bytes(*block));
    group_bytes.push_back(parameter_bytes(*model->norm) + parameter_bytes(*model->output));
    if (before_fsdp) before_fsdp(*model);
    fsdp = apply_fsdp(*model, models::decoder_plan(model->args()).fsdp_units, {group, nullptr}, {},
                      config::ReshardAfterForward::kDefault);
  }

  torch::Tensor loss() {
    auto tokens = torch::arange(16, torch::kLong).mul(97).remainder(2048).reshape({2, 8});
    return model->forward(tokens).pow(2).mean();
  }
};

// Identity whose backward records the memory counters: registered as a block's post-forward hook
// before FSDP's, it runs in backward right after FSDP's pre-backward of that block.
struct ProbeAtBackward : torch::autograd::Function<ProbeAtBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t slot) {
    ctx->saved_data["slot"] = slot;
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    *reinterpret_cast<metrics::MemoryStats*>(ctx->saved_data["slot"].toInt()) = metrics::memory_stats();
    return {grads[0], torch::Tensor()};
  }
};

// The tracker copies the tagged counters when it records a peak, and only then; re-tagging moves
// bytes between tags without raising the high water.
TEST(FsdpMemory, TrackerCopiesTheTaggedBytesAtThePeak) {
  metrics::install_memory_tracker();
  constexpr int64_t kMiB = 1 << 20;
  const auto base = metrics::memory_stats();
  metrics::reset_peak_memory();
  torch::Tensor comm;
  {
    metrics::MemoryTagScope scope(MemoryTag::kCommBuffers);
    comm = torch::empty({kMiB}, torch::kByte);
  }
  auto grads = torch::empty({2 * kMiB}, torch::kByte);  // untagged until tagged below
  metrics::tag_storage(grads, MemoryTag::kUnshardedGrads);
  auto at_peak = metrics::memory_stats();
  EXPECT_EQ(tagged(at_peak, MemoryTag::kCommBuffers) - tagged(base, MemoryTag::kCommBuffers), kMiB);
  EXPECT_EQ(tagged(at_peak, MemoryTag::kUnshardedGrads) - tagged(base, MemoryTag::kUnshardedGrads), 2 * kMiB);
  // The peak was the untagged allocation of `grads`: the copy then held only `comm`.
  EXPECT_EQ(at_peak.peak_tagged_bytes[size_t(MemoryTag::kCommBuffers)] - tagged(base, MemoryTag::kCommBuffers), kMiB);
  EXPECT_EQ(at_peak.peak_tagged_bytes[size_t(MemoryTag::kUnshardedGrads)], tagged(base, MemoryTag::kUnshardedGrads));
  metrics::tag_storage(grads, MemoryTag::kCommBuffers);
  comm = torch::Tensor();
  auto smaller = torch::empty({kMiB / 2}, torch::kByte);  // below the peak: nothing copied
  auto after = metrics::memory_stats();
  EXPECT_EQ(after.peak_tagged_bytes, at_peak.peak_tagged_bytes);
  EXPECT_EQ(tagged(after, MemoryTag::kCommBuffers) - tagged(base, MemoryTag::kCommBuffers), 2 * kMiB);
  EXPECT_EQ(after.tagged_high_water_bytes - tagged_total(base), 3 * kMiB);
  grads = torch::Tensor();
  EXPECT_EQ(tagged_total(metrics::memory_stats()), tagged_total(base));
}

// Forward: a group's gather buffer is copied out and freed before the next group's prefetch is
// allocated, so FSDP never holds more than the parameters in use and one gather buffer (its own
// during the copy-out, the next group's after it). Prefetching first would hold two buffers.
TEST(FsdpMemory, ForwardHoldsOneGatherBufferBesideTheParametersInUse) {
  OneRankFsdp run;
  const auto& b = run.group_bytes;
  int64_t expected = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    expected = std::max(expected, b[i] + std::max(b[i], i + 1 < b.size() ? b[i + 1] : 0));
  }
  const auto before = metrics::memory_stats();
  metrics::reset_peak_memory();
  {
    torch::NoGradGuard no_grad;
    run.loss();
  }
  const auto after = metrics::memory_stats();
  EXPECT_EQ(after.tagged_high_water_bytes - tagged_total(before), expected);
  EXPECT_EQ(tagged_total(after), tagged_total(before)) << "evaluation reshards every group";
}

// Backward, FSDP2's lifetimes: when a block's backward starts, FSDP holds that block's
// parameters, the prefetch of the block before it and the reduce-scatter of the group after it:
// its input and Gloo's receive buffer (N chunks; with one rank, each the group's bytes), both
// held by the collective until its wait and no longer. Nothing else: not the gradients or
// parameters of the group after it, nor this block's gather buffer. After the step nothing is
// left: no buffer is kept for the next step.
// The most FSDP holds at once is a group's parameters and their gradients beside those
// neighbours' buffers, at the end of its backward: a group's parameters are freed before its
// gradients are copied into the reduce-scatter input, so parameters, gradients and that copy are
// never alive together ([norm, output], kept gathered from its forward, would be the largest).
TEST(FsdpMemory, BackwardFreesEachGroupAsSoonAsItsReductionIsIssued) {
  std::vector<metrics::MemoryStats> at_backward(3);
  OneRankFsdp run([&](models::TransformerImpl& model) {
    for (auto* block : model.blocks()) {
      auto* slot = &at_backward[size_t(block->layer_id)];
      model.hooks.add_post_forward(*block, [slot](const torch::Tensor& y) {
        return ProbeAtBackward::apply(y, reinterpret_cast<int64_t>(slot));
      });
    }
  });
  const auto& b = run.group_bytes;
  const auto before = metrics::memory_stats();
  for (int step = 1; step <= 2; ++step) {
    SCOPED_TRACE(fmt::format("step {}", step));
    for (auto& [fqn, shard] : run.fsdp->sharded_parameters()) shard.mutable_grad() = torch::Tensor();
    metrics::reset_peak_memory();
    run.loss().backward();
    const auto after = metrics::memory_stats();
    EXPECT_EQ(tagged(after, MemoryTag::kUnshardedParams), tagged(before, MemoryTag::kUnshardedParams));
    EXPECT_EQ(tagged(after, MemoryTag::kUnshardedGrads), tagged(before, MemoryTag::kUnshardedGrads));
    EXPECT_EQ(tagged(after, MemoryTag::kCommBuffers), tagged(before, MemoryTag::kCommBuffers));
  }
  // Step 2's. Groups: 0 tok_embeddings, 1..3 the blocks, 4 the head; each block between its
  // neighbours' buffers (the prefetch before it, the reduction after it in flight).
  const int64_t most = std::max({2 * b[4] + b[3],  // the head, prefetching layers.2
                                 2 * b[4] + 2 * b[3] + b[2], 2 * b[3] + 2 * b[2] + b[1], 2 * b[2] + 2 * b[1] + b[0],
                                 2 * b[1] + 2 * b[0]});  // the embeddings
  EXPECT_EQ(metrics::memory_stats().tagged_high_water_bytes - tagged_total(before), most);
  for (size_t layer = 0; layer < at_backward.size(); ++layer) {
    SCOPED_TRACE(fmt::format("layers.{}", layer));
    const size_t i = layer + 1;  // its group
    const auto& s = at_backward[layer];
    EXPECT_EQ(tagged(s, MemoryTag::kUnshardedParams) - tagged(before, MemoryTag::kUnshardedParams), b[i]);
    EXPECT_EQ(tagged(s, MemoryTag::kUnshardedGrads) - tagged(before, MemoryTag::kUnshardedGrads), 0);
    EXPECT_EQ(tagged(s, MemoryTag::kCommBuffers) - tagged(before, MemoryTag::kCommBuffers), b[i - 1] + 2 * b[i + 1]);
  }
}

}  // namespace
}  // namespace ctitan::parallel
