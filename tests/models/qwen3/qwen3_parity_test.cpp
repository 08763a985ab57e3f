// Qwen3 trains in every layout with the losses and gradient norms of one process (issue #30):
// the tiny job (dim 64, 2 layers) as a Qwen3 (4 query heads of 32 over 2 kv heads, QK-norm, θ
// 1e6), through the launcher on loopback. The bound is expect_parity's (support/parity.h): fp32
// runs differ only in summation order. What is particular to Qwen3 under TP, its QK-norm weights
// kept whole with gradients summed over the group, would show as a gradient norm off by a
// factor of the group size if summed twice or not at all.
#include <gtest/gtest.h>

#include <iostream>

#include "support/parity.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

using testing::concat;
using testing::degrees;
using testing::expect_parity;

// hidden_dim 128 as the tiny job's Llama has (from dim 64); the flavor's head_dim 32 stays.
const std::vector<std::string> kQwen3 = {"--model.name", "qwen3", "--model.flavor", "debugmodel", "--model.hidden_dim",
                                         "128"};
const std::vector<std::string> kBatch4 = concat(kQwen3, {"--training.local_batch_size", "4"});

TEST(CliQwen3Parity, Fsdp2MatchesOneProcess) {
  expect_parity("Qwen3 FSDP(2)", 2, concat(kQwen3, concat(degrees(1, 2), {"--training.local_batch_size", "2"})), kBatch4);
}

TEST(CliQwen3Parity, Tp2MatchesOneProcess) {
  expect_parity("Qwen3 TP(2)", 2, concat(kBatch4, degrees(1, 1, 2)), kBatch4);
}

TEST(CliQwen3Parity, Pp2MatchesOneProcess) {
  expect_parity("Qwen3 PP(2) 1F1B", 2,
                concat(kBatch4, {"--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule",
                                 "1F1B"}),
                kBatch4);
}

TEST(CliQwen3Parity, Fsdp2ByTp2MatchesOneProcess) {
  expect_parity("Qwen3 FSDP(2)xTP(2)", 4, concat(kQwen3, concat(degrees(1, 2, 2), {"--training.local_batch_size", "2"})),
                kBatch4);
}

TEST(CliQwen3Parity, Hsdp2x2MatchesOneProcess) {
  expect_parity("Qwen3 HSDP(2x2)", 4, concat(kQwen3, concat(degrees(2, 2), {"--training.local_batch_size", "1"})),
                kBatch4);
}

// Activation checkpointing recomputes the blocks' forwards, the QK-norms' included: full AC
// under FSDP (recomputing gathers again), op-selective AC (the matmuls' and attention's outputs
// kept, the QK-norms recomputed) under TP, against one process without AC.
TEST(CliQwen3Parity, Fsdp2WithFullAcMatchesOneProcess) {
  expect_parity("Qwen3 FSDP(2) full AC", 2,
                concat(kQwen3, concat(degrees(1, 2), {"--training.local_batch_size", "2", "--activation_checkpoint.mode",
                                                      "full"})),
                kBatch4);
}

TEST(CliQwen3Parity, Tp2WithOpSelectiveAcMatchesOneProcess) {
  expect_parity("Qwen3 TP(2) selective op AC", 2,
                concat(kBatch4, concat(degrees(1, 1, 2), {"--activation_checkpoint.mode", "selective",
                                                          "--activation_checkpoint.selective_ac_option", "op"})),
                kBatch4);
}

// Tied embeddings (the 0.6B to 4B flavors; the tiny job's overrides make 0.6B tiny, its tying
// stays). The head's and the lookup's gradients meet in the one weight: under DDP before the
// hook reduces it (autograd sums a leaf's uses first); under FSDP in the embedding group's
// reduce-scatter at the end of backward; under TP each rank's head reads its own vocabulary rows
// of the embedding, as an untied head's slice would be.
const std::vector<std::string> kTied = {"--model.name", "qwen3", "--model.flavor", "0.6B", "--model.hidden_dim", "128",
                                        "--model.head_dim", "32", "--model.n_kv_heads", "2"};
const std::vector<std::string> kTiedBatch4 = concat(kTied, {"--training.local_batch_size", "4"});

TEST(CliQwen3Parity, TiedDdp2MatchesOneProcess) {
  expect_parity("Qwen3 tied DDP(2)", 2, concat(kTied, concat(degrees(2, 1), {"--training.local_batch_size", "2"})),
                kTiedBatch4);
}

TEST(CliQwen3Parity, TiedFsdp2MatchesOneProcess) {
  expect_parity("Qwen3 tied FSDP(2)", 2, concat(kTied, concat(degrees(1, 2), {"--training.local_batch_size", "2"})),
                kTiedBatch4);
}

TEST(CliQwen3Parity, TiedTp2MatchesOneProcess) {
  expect_parity("Qwen3 tied TP(2)", 2, concat(kTiedBatch4, degrees(1, 1, 2)), kTiedBatch4);
}

TEST(CliQwen3Parity, TiedFsdp2ByAsyncTp2MatchesOneProcess) {
  expect_parity("Qwen3 tied FSDP(2)xTP(2) async", 4,
                concat(kTied, concat(degrees(1, 2, 2), {"--training.local_batch_size", "2",
                                                        "--parallelism.enable_async_tensor_parallel", "true"})),
                kTiedBatch4);
}

// Checkpoints of sharded Qwen3s (QK-norm weights sharded by FSDP, whole under TP; a tied
// embedding sharded once) export to HF as one process's do: the step-4 checkpoints of both runs,
// read back by the safetensors library, differ only by the runs' summation order.
TEST(CliQwen3Parity, ShardedCheckpointsExportAsOneProcess) {
  const std::vector<std::string> save = {"--training.steps", "4", "--checkpoint.enable", "true", "--checkpoint.interval",
                                         "4"};
  auto fsdp_tp = testing::compare_hf_exports(
      4, concat(degrees(1, 2, 2), {"--training.local_batch_size", "2"}), concat(kBatch4, save));
  std::cout << "Qwen3 HF export of FSDP(2)xTP(2) vs 1 process after 4 steps: " << fsdp_tp.tensors
            << " tensors, max relative difference " << fsdp_tp.worst << "\n";
  EXPECT_EQ(fsdp_tp.tensors, 3 + 2 * 11);  // embed, lm_head, final norm; 11 per layer with the QK-norms
  EXPECT_LT(fsdp_tp.worst, 1e-4);
  auto tied = testing::compare_hf_exports(2, concat(degrees(1, 2), {"--training.local_batch_size", "2"}),
                                          concat(kTiedBatch4, save));
  std::cout << "tied Qwen3 HF export of FSDP(2) vs 1 process after 4 steps: " << tied.tensors
            << " tensors, max relative difference " << tied.worst << "\n";
  EXPECT_EQ(tied.tensors, 2 + 2 * 11);  // no lm_head
  EXPECT_LT(tied.worst, 1e-4);
}

// Under PP the embedding and the head are on different stages: one line naming the flavor,
// before the model is built.
TEST(CliQwen3Parity, TiedFlavorUnderPpIsRefusedByName) {
  testing::TempDir dir;
  auto args = concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                     concat(testing::tiny_job_args(dir.path().string()),
                            concat(kTied, {"--parallelism.pipeline_parallel_degree", "2", "--training.steps", "1"})));
  auto r = testing::run_ctitan(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.flavor '0.6B' of qwen3 ties the output layer to tok_embeddings, which pipeline "
                          "parallelism cannot split"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ctitan
