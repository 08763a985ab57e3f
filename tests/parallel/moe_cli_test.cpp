// Qwen3-MoE through the launcher on loopback, against one process with the same global batch
// (tests/support/parity.h argues the fp32 bounds): DDP(2), FSDP(2), FSDP(2) x TP(2), PP(2), CP(2),
// FSDP(2) with gradient accumulation and full activation checkpointing, and expert parallelism:
// EP(2), EP(2) x FSDP(2), EP(2) x TP(2), EP(2) x PP(2) with accumulation; the selection bias
// moving and logged; checkpoints resumed by one process and across EP degrees. DeepSeek-V3 (latent
// attention, dense and MoE layers, shared expert, grouped routing): FSDP(2), EP(2) x FSDP(2),
// EP(2) x TP(2), EP(2) x PP(2), DDP(2) x PP(2) with accumulation and AC, an EP checkpoint resumed
// by one process, and the layouts latent attention refuses (CP, async TP). Load balancing is on
// in all of them; the bias moves by sign(mean - load), which a count scaled alike on every expert (twice
// under recomputation, summed over tp ranks that route the same tokens) would not change, so
// CountsEveryTokenOnceInEveryLayout checks the counts' absolute sum.
//
// Routing is discrete, so parity also needs no near-tie between two experts' scores that the
// layouts' ~1e-7 rounding differences could flip; the runs print their deviation, and a flip
// would show as a jump of the loss, not a drift.
#include <fmt/format.h>
#include <fmt/ranges.h>
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
std::vector<std::string> ep(int degree) { return {"--parallelism.expert_parallel_degree", std::to_string(degree)}; }

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
  // Under EP: the all-to-all's bytes and exposed seconds per step.
  auto ep_rows = testing::run_tiny_job(2, concat(concat(concat(degrees(1, 2), ep(2)), kBatch2),
                                                 {"--training.steps", "2", "--metrics.log_freq", "1"}));
  ASSERT_FALSE(ep_rows.empty());
  EXPECT_GT(ep_rows.back()["moe/a2a_bytes_per_step"].get<double>(), 0.0) << ep_rows.back().dump();
  EXPECT_GE(ep_rows.back()["moe/a2a_exposed_s"].get<double>(), 0.0) << ep_rows.back().dump();
  auto off = testing::run_tiny_job(1, concat(kBatch4, {"--training.steps", "2", "--metrics.log_freq", "1",
                                                       "--model.load_balance_coeff", "0"}));
  ASSERT_FALSE(off.empty());
  EXPECT_TRUE(off.back().contains("moe/layer_0/load_cv"));
  EXPECT_FALSE(off.back().contains("moe/layer_0/bias_max"));
}


// Experts split over 2 ranks, tokens sent to them and back by all-to-all; FSDP has nothing left
// to shard the experts over (efsdp 1), the rest over both ranks.
TEST(CliMoe, EpTwoMatchesOneProcess) { expect_parity("Qwen3-MoE EP(2)", 2, concat(concat(degrees(1, 2), ep(2)), kBatch2), kBatch4); }

// dp_shard 4 = efsdp 2 x ep 2: each rank holds 4 of the 8 experts, sharded again over 2 ranks.
TEST(CliMoe, EpTwoByFsdpTwoMatchesOneProcess) {
  expect_parity("Qwen3-MoE EP(2)xFSDP(2)", 4,
                concat(concat(degrees(1, 4), ep(2)), concat(kMoe, {"--training.local_batch_size", "1"})), kBatch4);
}

// The ep group is a tp rank's peers in dp_shard: each sends its share of the sequence.
TEST(CliMoe, EpTwoByTpTwoMatchesOneProcess) {
  expect_parity("Qwen3-MoE EP(2)xTP(2)", 4, concat(concat(degrees(1, 2, 2), ep(2)), kBatch2), kBatch4);
}

// Each stage's MoE layers dispatch within the stage's ep group; 2 microbatches of 1 per rank and
// step (GPipe: 1F1B needs as many pipeline microbatches per run as stages).
TEST(CliMoe, EpTwoByPpTwoWithAccumulationMatchesOneProcess) {
  expect_parity("Qwen3-MoE EP(2)xPP(2), 2 microbatches", 4,
                concat(concat(degrees(1, 2), ep(2)),
                       concat(kMoe, {"--training.local_batch_size", "1", "--training.global_batch_size", "4",
                                     "--parallelism.pipeline_parallel_degree", "2",
                                     "--parallelism.pipeline_parallel_schedule", "GPipe"})),
                kBatch4);
}

// Steps 1-4 in `first_layout` on `first_nproc` ranks (checkpoint at 4), steps 5-8 resumed in
// `second_layout`: the losses of both parts match the uninterrupted one-process run (parity.h's
// bound). The bias is saved whole: without it the resumed routing would part from the reference.
void expect_resume_matches_for(const std::vector<std::string>& reference, int first_nproc,
                               const std::vector<std::string>& first_layout, int second_nproc,
                               const std::vector<std::string>& second_layout) {
  testing::TempDir dir;
  const std::vector<std::string> common = {"--training.steps", "8", "--metrics.log_freq", "1", "--checkpoint.enable",
                                           "--checkpoint.interval", "4", "--checkpoint.last_save_model_only", "false"};
  auto one = testing::run_tiny_job(1, concat(common, reference));
  const auto head = [](int nproc) {
    return nproc == 1 ? std::vector<std::string>{"train"}
                      : std::vector<std::string>{"run", "--nproc-per-node", std::to_string(nproc), "--master-port", "0", "train"};
  };
  auto first = testing::run_ctitan(concat(concat(head(first_nproc), testing::tiny_job_args(dir.path())),
                                          concat(concat(common, {"--training.steps", "4"}), first_layout)),
                                   240);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto inspect = testing::run_ctitan({"checkpoint", "inspect", dir.file("checkpoint/step-4"), "--tensors"});
  EXPECT_NE(inspect.output.find("layers.1.moe.expert_bias"), std::string::npos) << inspect.output;
  auto resumed = testing::run_ctitan(concat(concat(head(second_nproc), testing::tiny_job_args(dir.path())),
                                            concat(common, second_layout)),
                                     240);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(testing::first_logged_step(resumed.output), 5) << resumed.output;
  EXPECT_EQ(testing::expect_losses_match_by_step(testing::read_jsonl(dir.file("metrics.jsonl")), one), 8);
}

void expect_resume_matches(int first_nproc, const std::vector<std::string>& first_layout, int second_nproc,
                           const std::vector<std::string>& second_layout) {
  expect_resume_matches_for(kBatch4, first_nproc, first_layout, second_nproc, second_layout);
}

TEST(CliMoe, FsdpCheckpointResumesInOneProcess) {
  expect_resume_matches(2, concat(degrees(1, 2), kBatch2), 1, kBatch4);
}

// Experts split over 2 ranks and sharded over 2 more, saved as whole (E, ...) tensors: read back
// by one process, and by EP(4) on 4 ranks (2 experts each).
TEST(CliMoe, EpCheckpointReshardsToOneProcessAndToEpFour) {
  const auto ep2_fsdp2 = concat(concat(degrees(1, 4), ep(2)), concat(kMoe, {"--training.local_batch_size", "1"}));
  expect_resume_matches(4, ep2_fsdp2, 1, kBatch4);
  expect_resume_matches(4, ep2_fsdp2, 4, concat(concat(degrees(1, 4), ep(4)), concat(kMoe, {"--training.local_batch_size", "1"})));
}

// Each step's routed choices, summed over the ranks, are the global batch's tokens x top_k
// (4 x 32 x 2) in every layout: accumulation with full and op-selective AC (a recomputation
// counts nothing), TP (each tp rank routes its share), CP (each cp rank its chunks), EP x PP.
TEST(CliMoe, CountsEveryTokenOnceInEveryLayout) {
  const std::vector<std::string> two = {"--training.steps", "2", "--metrics.log_freq", "1"};
  const std::vector<std::string> mb1 = concat(kMoe, {"--training.local_batch_size", "1", "--training.global_batch_size", "4"});
  for (const auto& [nproc, layout] : std::vector<std::pair<int, std::vector<std::string>>>{
           {2, concat(degrees(1, 2), concat(mb1, {"--activation_checkpoint.mode", "full"}))},
           {2, concat(degrees(1, 2), concat(mb1, {"--activation_checkpoint.mode", "selective",
                                                  "--activation_checkpoint.selective_ac_option", "op"}))},
           {4, concat(degrees(1, 2, 2), kBatch2)},
           {2, concat(concat(degrees(1, 1), kBatch4), {"--parallelism.context_parallel_degree", "2"})},
           {4, concat(concat(degrees(1, 2), ep(2)), concat(mb1, {"--parallelism.pipeline_parallel_degree", "2",
                                                                 "--parallelism.pipeline_parallel_schedule", "GPipe"}))}}) {
    auto rows = testing::run_tiny_job(nproc, concat(two, layout));
    int checked = 0;
    for (const auto& r : rows) {
      for (const char* layer : {"moe/layer_0/routed", "moe/layer_1/routed"}) {
        if (!r.contains(layer)) continue;
        EXPECT_EQ(r[layer].get<double>(), 4.0 * 32 * 2) << layer << " in " << fmt::format("{}", fmt::join(layout, " "));
        ++checked;
      }
    }
    EXPECT_GE(checked, 2) << fmt::format("{}", fmt::join(layout, " "));  // rank 0's stage's layers, each step
  }
}

// The sequence-wise balance loss (alpha 0.01 here, 0.0001 in DeepSeek-V3's paper: larger, so
// that it moves the routers) is a mean over the step's sequences: DDP(2) and EP(2) x PP(2) with
// 2 microbatches each add their shares to the one-process loss, and metrics.jsonl logs it.
TEST(CliMoe, BalanceLossMatchesOneProcess) {
  const std::vector<std::string> aux = {"--model.aux_loss_alpha", "0.01"};
  expect_parity("Qwen3-MoE DDP(2) + balance loss", 2, concat(concat(degrees(2, 1), kBatch2), aux), concat(kBatch4, aux));
  expect_parity("Qwen3-MoE EP(2)xPP(2), 2 microbatches + balance loss", 4,
                concat(concat(degrees(1, 2), ep(2)),
                       concat(concat(kMoe, aux), {"--training.local_batch_size", "1", "--training.global_batch_size", "4",
                                                  "--parallelism.pipeline_parallel_degree", "2",
                                                  "--parallelism.pipeline_parallel_schedule", "GPipe"})),
                concat(kBatch4, aux));
  auto rows = testing::run_tiny_job(1, concat(concat(kBatch4, aux), {"--training.steps", "2", "--metrics.log_freq", "1"}));
  ASSERT_FALSE(rows.empty());
  ASSERT_TRUE(rows.back().contains("moe/aux_loss")) << rows.back().dump();
  // Per sequence sum_e f_e P_e is 1 at balance and at most E (every choice on one expert): the
  // logged loss lies in (0, alpha x E x layers] = (0, 0.01 x 8 x 2].
  EXPECT_GT(rows.back()["moe/aux_loss"].get<double>(), 0.0);
  EXPECT_LE(rows.back()["moe/aux_loss"].get<double>(), 0.01 * 8 * 2);
  // Per-sequence statistics need whole sequences: refused under TP in one line naming the key.
  testing::TempDir dir;
  auto r = testing::run_ctitan(concat(concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                             testing::tiny_job_args(dir.path())),
                                      concat(degrees(1, 1, 2), concat(kBatch4, aux))),
                               120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.aux_loss_alpha 0.01 needs whole sequences"), std::string::npos) << r.output;
}

// A capacity of 1.0 x the even share drops the choices beyond it (per forward, so each layout
// drops by its own microbatches: no parity, as GShard's per-device capacity); the job trains in
// one process and under EP(2), and the routed counts still count every choice made.
TEST(CliMoe, CapacityFactorTrains) {
  const std::vector<std::string> capacity = {"--model.capacity_factor", "1.0", "--training.steps", "20",
                                             "--metrics.log_freq", "1"};
  for (const auto& [nproc, layout] : std::vector<std::pair<int, std::vector<std::string>>>{
           {1, kBatch4}, {2, concat(concat(degrees(1, 2), ep(2)), kBatch2)}}) {
    auto rows = testing::run_tiny_job(nproc, concat(capacity, layout));
    ASSERT_GE(rows.size(), 20u);
    EXPECT_LT(rows.back()["loss"].get<double>(), 0.6 * rows.front()["loss"].get<double>());
    EXPECT_EQ(rows.back()["moe/layer_0/routed"].get<double>(), 4.0 * 32 * 2);
  }
}

// One line naming both keys, on every rank's behalf, before anything is built.
TEST(CliMoe, ExpertsNotDivisibleByTheEpDegreeAreRefusedNamingTheKeys) {
  testing::TempDir dir;
  auto r = testing::run_ctitan(concat(concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                             testing::tiny_job_args(dir.path())),
                                      concat(concat(degrees(1, 2), ep(2)), concat(kBatch2, {"--model.num_experts", "3",
                                                                                             "--model.top_k", "1"}))),
                               120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.num_experts 3 is not divisible by parallelism.expert_parallel_degree 2"),
            std::string::npos) << r.output;
}

// ---- DeepSeek-V3: latent attention, a dense first layer, a shared expert, grouped sigmoid routing ----

// The tiny job as DeepSeek-V3's debug model: layer 0 dense (hidden 128), layer 1 MoE (8 experts
// of 32 in 4 groups, the best 2, top 2, one shared expert, bias on); latent rank 64.
const std::vector<std::string> kDeepseek = {"--model.name", "deepseek_v3", "--model.flavor", "debugmodel",
                                            "--model.moe_hidden_dim", "32", "--model.hidden_dim", "128"};
const std::vector<std::string> kDeepseek4 = concat(kDeepseek, {"--training.local_batch_size", "4"});

TEST(CliMoe, DeepseekFsdpTwoMatchesOneProcess) {
  expect_parity("DeepSeek-V3 FSDP(2)", 2, concat(degrees(1, 2), concat(kDeepseek, {"--training.local_batch_size", "2"})),
                kDeepseek4);
}

TEST(CliMoe, DeepseekEpTwoByFsdpTwoMatchesOneProcess) {
  expect_parity("DeepSeek-V3 EP(2)xFSDP(2)", 4,
                concat(concat(degrees(1, 4), ep(2)), concat(kDeepseek, {"--training.local_batch_size", "1"})), kDeepseek4);
}

// The dense layer on one stage, the MoE layer on the other; 2 microbatches per rank and step,
// full activation checkpointing (latent attention recomputed in backward).
TEST(CliMoe, DeepseekPpTwoWithAccumulationAndCheckpointingMatchesOneProcess) {
  expect_parity("DeepSeek-V3 DDP(2)xPP(2), 2 microbatches, AC full", 4,
                concat(degrees(2, 1), concat(kDeepseek, {"--training.local_batch_size", "1", "--training.global_batch_size",
                                                         "4", "--parallelism.pipeline_parallel_degree", "2",
                                                         "--parallelism.pipeline_parallel_schedule", "GPipe",
                                                         "--activation_checkpoint.mode", "full"})),
                kDeepseek4);
}

// Heads split over tp: wq and wkv_b column-wise, wo row-wise, the latents whole on each rank.
TEST(CliMoe, DeepseekEpTwoByTpTwoMatchesOneProcess) {
  expect_parity("DeepSeek-V3 EP(2)xTP(2)", 4,
                concat(concat(degrees(1, 2, 2), ep(2)), concat(kDeepseek, {"--training.local_batch_size", "2"})),
                kDeepseek4);
}

TEST(CliMoe, DeepseekEpTwoByPpTwoMatchesOneProcess) {
  expect_parity("DeepSeek-V3 EP(2)xPP(2)", 4,
                concat(concat(degrees(1, 2), ep(2)),
                       concat(kDeepseek, {"--training.local_batch_size", "2", "--parallelism.pipeline_parallel_degree",
                                          "2", "--parallelism.pipeline_parallel_schedule", "1F1B"})),
                kDeepseek4);
}

// Latent attention takes neither ring attention nor async TP's fused projections: one line each.
TEST(CliMoe, DeepseekRefusesContextParallelismAndAsyncTpNamingTheKey) {
  for (const auto& [layout, needle] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {concat(degrees(1, 1, 2), {"--parallelism.enable_async_tensor_parallel", "true"}),
            "parallelism.enable_async_tensor_parallel: model.name deepseek_v3 uses latent attention"},
           {concat(degrees(1, 1), {"--parallelism.context_parallel_degree", "2"}),
            "set parallelism.context_parallel_degree to 1"}}) {
    testing::TempDir dir;
    auto r = testing::run_ctitan(concat(concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                               testing::tiny_job_args(dir.path())),
                                        concat(layout, kDeepseek4)),
                                 120);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  }
}

TEST(CliMoe, DeepseekEpCheckpointResumesInOneProcess) {
  expect_resume_matches_for(kDeepseek4, 4, concat(concat(degrees(1, 4), ep(2)), concat(kDeepseek, {"--training.local_batch_size", "1"})),
                            1, kDeepseek4);
}

}  // namespace
}  // namespace ctitan::moe_cli_test
