// Qwen3-MoE through the launcher on loopback, against one process with the same global batch
// (tests/support/parity.h argues the fp32 bounds): DDP(2), FSDP(2), FSDP(2) x TP(2), PP(2), CP(2),
// and FSDP(2) with gradient accumulation and full activation checkpointing; the selection bias
// moving and logged; a FSDP(2) checkpoint resumed by one process. Load balancing is on in all of
// them, so each layout must also count every token once and sum the counts over the right ranks:
// a count summed over too few ranks (or twice under recomputation) moves a bias the other way,
// routes tokens elsewhere and moves the loss far beyond 1e-4.
//
// Routing is discrete, so parity also needs no near-tie between two experts' scores that the
// layouts' ~1e-7 rounding differences could flip; the runs print their deviation, and a flip
// would show as a jump of the loss, not a drift.
#include <gtest/gtest.h>

#include <iostream>

#include "support/parity.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::moe_cli_test {
namespace {

using testing::concat;
using testing::degrees;
using testing::expect_parity;

// The tiny job (dim 64, 2 layers, 4 heads) as a Qwen3-MoE: 8 experts of 32, top 2, 2 kv heads
// of 16, selection bias coefficient 1e-3 (the flavor's).
const std::vector<std::string> kMoe = {"--model.name", "qwen3_moe", "--model.flavor", "debugmodel",
                                       "--model.head_dim", "16", "--model.moe_hidden_dim", "32"};
const std::vector<std::string> kBatch4 = concat(kMoe, {"--training.local_batch_size", "4"});
const std::vector<std::string> kBatch2 = concat(kMoe, {"--training.local_batch_size", "2"});

TEST(CliMoe, DdpTwoMatchesOneProcess) { expect_parity("Qwen3-MoE DDP(2)", 2, concat(degrees(2, 1), kBatch2), kBatch4); }

TEST(CliMoe, FsdpTwoMatchesOneProcess) {
  expect_parity("Qwen3-MoE FSDP(2)", 2, concat(degrees(1, 2), kBatch2), kBatch4);
}

// TP splits attention; each tp rank routes its half of the sequence through whole experts, and
// the experts' and router's gradients are summed over tp as the norms' are.
TEST(CliMoe, FsdpTwoByTpTwoMatchesOneProcess) {
  expect_parity("Qwen3-MoE FSDP(2)xTP(2)", 4, concat(degrees(1, 2, 2), kBatch2), kBatch4);
}

TEST(CliMoe, PpTwoMatchesOneProcess) {
  expect_parity("Qwen3-MoE PP(2) 1F1B", 2,
                concat(concat(degrees(1, 1), kBatch4), {"--parallelism.pipeline_parallel_degree", "2",
                                                        "--parallelism.pipeline_parallel_schedule", "1F1B"}),
                kBatch4);
}

TEST(CliMoe, CpTwoMatchesOneProcess) {
  expect_parity("Qwen3-MoE CP(2)", 2, concat(concat(degrees(1, 1), kBatch4), {"--parallelism.context_parallel_degree", "2"}),
                kBatch4);
}

// Two microbatches of 1 per rank against one batch of 4, under full AC: the counts add over the
// microbatches and the recomputed forward does not count again.
TEST(CliMoe, AccumulationAndCheckpointingMatchOneProcess) {
  expect_parity("Qwen3-MoE FSDP(2), 2 microbatches, AC full", 2,
                concat(concat(degrees(1, 2), kMoe), {"--training.local_batch_size", "1", "--training.global_batch_size",
                                                     "4", "--activation_checkpoint.mode", "full"}),
                kBatch4);
}

// The bias moves (by the coefficient each step, so within steps x 1e-3) and metrics.jsonl carries
// each layer's load and bias range; with the coefficient 0 there is no bias and no bias field.
TEST(CliMoe, SelectionBiasMovesAndLoadIsLogged) {
  auto rows = testing::run_tiny_job(2, concat(concat(degrees(1, 2), kBatch2), {"--training.steps", "6", "--metrics.log_freq", "3"}));
  int logged = 0;
  for (const auto& r : rows) {
    if (!r.contains("loss")) continue;
    ++logged;
    for (const char* layer : {"moe/layer_0/", "moe/layer_1/"}) {
      const std::string p = layer;
      ASSERT_TRUE(r.contains(p + "load_cv")) << r.dump();
      EXPECT_GE(r[p + "load_min"].get<double>(), 0.0);
      EXPECT_LE(r[p + "load_min"].get<double>(), 1.0);
      EXPECT_GE(r[p + "load_max"].get<double>(), 1.0);
      const double bias_min = r[p + "bias_min"].get<double>(), bias_max = r[p + "bias_max"].get<double>();
      EXPECT_LT(bias_min, 0.0) << r.dump();  // zero-mean: some experts down, some up
      EXPECT_GT(bias_max, 0.0) << r.dump();
      EXPECT_LE(bias_max - bias_min, 2 * 1e-3 * double(r["step"].get<int64_t>()) + 1e-9) << r.dump();
    }
  }
  EXPECT_EQ(logged, 2);
  auto off = testing::run_tiny_job(1, concat(kBatch4, {"--training.steps", "2", "--metrics.log_freq", "1",
                                                       "--model.load_balance_coeff", "0"}));
  ASSERT_FALSE(off.empty());
  EXPECT_TRUE(off.back().contains("moe/layer_0/load_cv"));
  EXPECT_FALSE(off.back().contains("moe/layer_0/bias_max"));
}

// A FSDP(2) checkpoint, the experts sharded and the bias saved whole, resumed by one process: the
// resumed steps match the uninterrupted one-process run. Without the bias in the checkpoint the
// resumed routing would start from zero bias and part from the reference.
TEST(CliMoe, CheckpointResumesInOneProcess) {
  testing::TempDir dir;
  const std::vector<std::string> common = {"--training.steps", "8", "--metrics.log_freq", "1", "--checkpoint.enable",
                                           "--checkpoint.interval", "4", "--checkpoint.last_save_model_only", "false"};
  auto one = testing::run_tiny_job(1, concat(common, kBatch4));
  auto first = testing::run_ctitan(
      concat(concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"}, testing::tiny_job_args(dir.path())),
             concat(concat(common, {"--training.steps", "4"}), concat(degrees(1, 2), kBatch2))),
      240);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto inspect = testing::run_ctitan({"checkpoint", "inspect", dir.file("checkpoint/step-4"), "--tensors"});
  EXPECT_NE(inspect.output.find("layers.1.moe.expert_bias"), std::string::npos) << inspect.output;
  auto resumed = testing::run_ctitan(concat(concat({"train"}, testing::tiny_job_args(dir.path())), concat(common, kBatch4)), 240);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(testing::first_logged_step(resumed.output), 5) << resumed.output;
  auto rows = testing::read_jsonl(dir.file("metrics.jsonl"));
  int compared = 0;
  for (const auto& r : rows) {
    if (!r.contains("loss")) continue;
    const auto step = r["step"].get<int64_t>();
    for (const auto& o : one) {
      if (o.contains("loss") && o["step"].get<int64_t>() == step) {
        EXPECT_NEAR(r["loss"].get<double>(), o["loss"].get<double>(), 1e-4 * o["loss"].get<double>()) << "step " << step;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 8);
}

}  // namespace
}  // namespace ctitan::moe_cli_test
