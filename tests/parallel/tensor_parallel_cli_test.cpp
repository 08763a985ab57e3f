// Tensor parallelism through the launcher on loopback, against one process with the same global
// batch (tests/support/parity.h argues the fp32 bounds): TP(2) with and without loss parallel,
// async TP, FSDP(2) x TP(2), gradient accumulation, an uneven vocabulary, activation checkpointing (equal
// to TP without it, bitwise), bf16, the model state per rank, an HF export of a TP checkpoint,
// and the configurations TP refuses.
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
using testing::kThirtySteps;
using testing::Rows;

const std::vector<std::string> kTpBatch4 = {"--training.local_batch_size", "4"};
const std::vector<std::string> kAsync = {"--parallelism.enable_async_tensor_parallel", "true"};

TEST(CliTensorParallel, Tp2MatchesOneProcessWithLossParallel) {
  expect_parity("TP(2) loss parallel", 2, concat(degrees(1, 1, 2), kTpBatch4));
}

TEST(CliTensorParallel, Tp2MatchesOneProcessWithGatheredLogits) {
  expect_parity("TP(2) gathered logits", 2,
                concat(degrees(1, 1, 2), concat(kTpBatch4, {"--parallelism.disable_loss_parallel", "true"})));
}

// 2-D mesh: FSDP shards each rank's TP slices over dp_shard; the data splits over dp only.
TEST(CliTensorParallel, FsdpTwoByTpTwoMatchesOneProcess) {
  expect_parity("FSDP(2)xTP(2)", 4, concat(degrees(1, 2, 2), {"--training.local_batch_size", "2"}));
}

// DDP replicas of a TP group: DDP all-reduces the TP slices' gradients over dp_replicate.
TEST(CliTensorParallel, DdpTwoByTpTwoMatchesOneProcess) {
  expect_parity("DDP(2)xTP(2)", 4, concat(degrees(2, 1, 2), {"--training.local_batch_size", "2"}));
}

// 3-D mesh, 8 processes: HSDP (replicate 2 x shard 2) over TP(2) slices.
TEST(CliTensorParallel, HsdpTwoByTwoByTpTwoMatchesOneProcess) {
  expect_parity("HSDP(2x2)xTP(2)", 8, concat(degrees(2, 2, 2), {"--training.local_batch_size", "1"}));
}

// Two microbatches of 2 per step against one batch of 4.
TEST(CliTensorParallel, GradientAccumulationMatchesOneBigBatch) {
  expect_parity("TP(2) 2 microbatches", 2,
                concat(degrees(1, 1, 2), {"--training.local_batch_size", "2", "--training.global_batch_size", "4"}));
}

// 33 rows over 2 ranks: 17 + 16 rows of tok_embeddings and output.
TEST(CliTensorParallel, UnevenVocabMatchesOneProcess) {
  std::vector<std::string> vocab = {"--model.vocab_size", "33"};
  expect_parity("TP(2) vocab 33", 2, concat(vocab, concat(degrees(1, 1, 2), kTpBatch4)), concat(vocab, kTpBatch4));
}

// Async TP (fused, micro-pipelined collective matmuls) computes what TP computes, in sequence
// chunks and with the q/k/v input gradients summed in another order: fp32 rounding, so the same
// bound against one process as every other layout.
TEST(CliTensorParallel, AsyncTp2MatchesOneProcess) {
  expect_parity("async TP(2)", 2, concat(degrees(1, 1, 2), concat(kTpBatch4, kAsync)));
}

// Under FSDP the fused calls read the gathered parameters, and full AC runs them (and their
// collectives) again in backward.
TEST(CliTensorParallel, AsyncFsdpTwoByTpTwoWithFullAcMatchesOneProcess) {
  expect_parity("async FSDP(2)xTP(2) AC full", 4,
                concat(degrees(1, 2, 2), concat({"--training.local_batch_size", "2", "--activation_checkpoint.mode", "full"},
                                                kAsync)));
}

// Recomputation runs the same ops in the same order, the tp collectives included, so the losses
// equal TP(2) without checkpointing bit for bit; with async TP as well (op SAC takes the fused
// calls' kept matmul chunks back and communicates again, as full AC does).
TEST(CliTensorParallel, ActivationCheckpointingLossesEqualNoCheckpointingBitwise) {
  for (bool async : {false, true}) {
    auto base = concat(degrees(1, 1, 2), concat(kTpBatch4, {"--training.steps", "6", "--metrics.log_freq", "1"}));
    if (async) base = concat(base, kAsync);
    auto none = testing::run_tiny_job(2, base);
    ASSERT_EQ(none.size(), 6u);
    for (std::vector<std::string> mode : {std::vector<std::string>{"--activation_checkpoint.mode", "full"},
                                          {"--activation_checkpoint.mode", "selective",
                                           "--activation_checkpoint.selective_ac_option", "2"},
                                          {"--activation_checkpoint.mode", "selective",
                                           "--activation_checkpoint.selective_ac_option", "op"}}) {
      auto ac = testing::run_tiny_job(2, concat(base, mode));
      ASSERT_EQ(ac.size(), 6u) << mode.back();
      for (size_t i = 0; i < 6; ++i) {
        EXPECT_EQ(ac[i]["loss"], none[i]["loss"]) << mode.back() << (async ? " async" : "") << " step " << i + 1;
      }
    }
  }
}

// bf16 under TP against one process under bf16 autocast: both compute in bf16 with fp32 master
// weights, rounding at different points (TP's partial sums round before the reduce-scatter), so
// the bound is the bf16 resolution scale, 2^-8 ~ 4e-3, with margin: 3e-2 relative on the loss.
TEST(CliTensorParallel, Bf16StaysCloseToOneProcess) {
  std::vector<std::string> bf16 = {"--training.mixed_precision_param", "bfloat16", "--training.steps", "10",
                                   "--metrics.log_freq", "1", "--training.local_batch_size", "4"};
  auto single = testing::run_tiny_job(1, bf16);
  for (bool async : {false, true}) {  // async TP applies autocast's casts itself (collective_matmul.cpp)
    auto tp = testing::run_tiny_job(2, concat(bf16, async ? concat(degrees(1, 1, 2), kAsync) : degrees(1, 1, 2)));
    auto d = testing::compare_runs(single, tp, 10);
    std::cout << (async ? "async " : "") << "TP(2) bf16 vs 1 process bf16 autocast over 10 steps: max relative "
              << "difference loss " << d.loss << "\n";
    EXPECT_LT(d.loss, 3e-2) << (async ? "async" : "sync");
  }
}

// Each TP rank holds half of every linear, embedding and output, and whole norms: the model
// state (parameters, gradients, AdamW moments; bytes of the tensors' storage) is about half.
TEST(CliTensorParallel, ModelStatePerRankIsAboutHalfOfOneProcess) {
  std::vector<std::string> common = concat(kTpBatch4, {"--training.steps", "2"});
  auto single = testing::run_tiny_job(1, common);
  auto tp = testing::run_tiny_job(2, concat(common, degrees(1, 1, 2)));
  ASSERT_FALSE(single.empty());
  ASSERT_FALSE(tp.empty());
  auto state = [](const nlohmann::json& row) {
    return row["memory_params_bytes"].get<double>() + row["memory_grads_bytes"].get<double>() +
           row["memory_optimizer_bytes"].get<double>();
  };
  double t = state(tp.back()), s = state(single.back());
  std::cout << "model state per rank: TP(2) " << t << " bytes, 1 process " << s << " bytes, ratio " << t / s << "\n";
  EXPECT_GT(t, 0.45 * s);  // the gradients and moments are really there
  EXPECT_LE(t, 0.55 * s);
}

// A TP(2) checkpoint exports to HF with the global tensors: equal (to the fp32 parity bound) to
// the export of the same 4 steps trained by one process, read back by the safetensors library.
TEST(CliTensorParallel, HfExportOfATpCheckpointEqualsOneProcesss) {
  if (!testing::have_python()) GTEST_SKIP() << "no venv Python (CTITAN_PYTHON is empty): safetensors reads the exports";
  auto result = testing::compare_hf_exports(
      2, degrees(1, 1, 2), concat(kTpBatch4, {"--training.steps", "4", "--checkpoint.enable", "true", "--checkpoint.interval", "4"}));
  std::cout << "HF export of TP(2) vs 1 process after 4 steps: " << result.tensors << " tensors, max relative difference "
            << result.worst << "\n";
  EXPECT_EQ(result.tensors, 2 + 1 + 2 * 9);  // embed, lm_head, final norm; 9 per layer
  EXPECT_LT(result.worst, 1e-4);
}

// `train` exits 2 on a config error; `ctitan run` exits 1 when its ranks failed (torchrun's
// convention), after each rank printed the one line.
void expect_tp_config_error(const std::vector<std::string>& head, const std::vector<std::string>& args,
                         const std::string& message) {
  testing::TempDir dir;
  auto r = testing::run_ctitan(concat(concat(head, testing::tiny_job_args(dir.path())), args));
  EXPECT_EQ(r.exit_code, head.front() == "run" ? 1 : 2) << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
}

TEST(CliTensorParallel, DegreesTpCannotSplitAreOneLineErrors) {
  const std::vector<std::string> two = {"run", "--nproc-per-node", "2", "--master-port", "0", "train"};
  expect_tp_config_error(two, concat(degrees(1, 1, 2), {"--training.seq_len", "31"}),
                      "training.seq_len (sequence parallel splits it) 31 is not divisible by "
                      "parallelism.tensor_parallel_degree 2");
  expect_tp_config_error(two, concat(degrees(1, 1, 2), {"--model.n_heads", "1", "--model.dim", "64"}),
                      "model.n_heads 1 is not divisible by parallelism.tensor_parallel_degree 2");
  // One process cannot hold two tp ranks: the degrees must multiply to the world size.
  expect_tp_config_error({"train"}, degrees(1, 1, 2), "does not equal the world size 1");
}

}  // namespace
}  // namespace ctitan
