// FSDP and HSDP through the launcher on loopback, against one process with the same global batch.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "support/parity.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

using testing::concat;
using testing::read_jsonl;
using testing::Rows;
using testing::degrees;
using testing::expect_parity;
using testing::kThirtySteps;

Rows run_job(int nproc, const std::vector<std::string>& args) { return testing::run_tiny_job(nproc, args); }

TEST(CliFsdp, TwoRanksMatchOneProcess) {
  expect_parity("FSDP(2)", 2, concat(degrees(1, 2), {"--training.local_batch_size", "2"}));
}

TEST(CliFsdp, FourRanksMatchOneProcess) {
  expect_parity("FSDP(4)", 4, concat(degrees(1, 4), {"--training.local_batch_size", "1"}));
}

TEST(CliFsdp, HsdpTwoByTwoMatchesOneProcess) {
  expect_parity("HSDP(2x2)", 4, concat(degrees(2, 2), {"--training.local_batch_size", "1"}));
}

// A vocab of 33 rows over 2 ranks: rank 0 holds rows 0..16 of tok_embeddings and output, rank 1
// rows 17..32 plus one padding row that must never reach the optimizer, the norm or the loss.
TEST(CliFsdp, UnevenVocabMatchesOneProcess) {
  std::vector<std::string> vocab = {"--model.vocab_size", "33"};
  expect_parity("FSDP(2) vocab 33", 2, concat(vocab, concat(degrees(1, 2), {"--training.local_batch_size", "2"})),
                concat(vocab, {"--training.local_batch_size", "4"}));
}

// Gradient accumulation, 2 ranks x 2 microbatches of 1 against one batch of 4: both sync modes
// give the update of the big batch (the loss is divided by the global token count once).
TEST(CliFsdp, BothGradientSyncModesMatchOneBigBatch) {
  for (std::string mode : {"every_microbatch", "last_microbatch"}) {
    expect_parity("FSDP(2) " + mode, 2,
                  concat(degrees(1, 2), {"--training.local_batch_size", "1", "--training.global_batch_size", "4",
                                         "--parallelism.fsdp_gradient_sync", mode}));
  }
}

// Every reshard policy computes the same thing; only memory and traffic differ. Resharding frees
// each block's gathered parameters after its forward (the storage autograd's saved views share),
// so the peak is lower, and backward gathers them again, so more bytes move. The peak only drops
// once the model has more blocks than resharding keeps in flight (the block in backward, its
// gather buffer, the prefetched one): 8 layers here; with 2 it is no lower.
TEST(CliFsdp, ReshardPoliciesGiveIdenticalLosses) {
  std::vector<std::string> base = concat(degrees(1, 2), {"--training.local_batch_size", "2", "--training.steps", "10",
                                                         "--metrics.log_freq", "1", "--model.n_layers", "8"});
  auto always = run_job(2, concat(base, {"--parallelism.fsdp_reshard_after_forward", "always"}));
  auto never = run_job(2, concat(base, {"--parallelism.fsdp_reshard_after_forward", "never"}));
  ASSERT_EQ(always.size(), 10u);
  ASSERT_EQ(never.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(always[i]["loss"], never[i]["loss"]) << "step " << i + 1;
  // Resharding gathers every block a second time for backward: more bytes per step.
  EXPECT_GT(always.back()["comm_bytes_per_step"].get<double>(), never.back()["comm_bytes_per_step"].get<double>());
  EXPECT_LT(always.back()["memory_peak_bytes"].get<double>(), never.back()["memory_peak_bytes"].get<double>());
}

// bf16 parameters (all-gather and compute) with fp32 reduction against one process under bf16
// autocast: the two round differently (FSDP computes everything from bf16 weights, autocast
// keeps fp32 residuals), so the bound is the bf16 resolution scale, 2^-8 ~ 4e-3, times a
// margin: 3e-2 relative on the loss. A wrong reduction would be off by far more.
TEST(CliFsdp, Bf16StaysCloseToOneProcess) {
  std::vector<std::string> bf16 = {"--training.mixed_precision_param", "bfloat16", "--training.steps", "20",
                                   "--metrics.log_freq", "1"};
  auto single = run_job(1, concat(bf16, {"--training.local_batch_size", "4"}));
  auto sharded = run_job(2, concat(bf16, concat(degrees(1, 2), {"--training.local_batch_size", "2"})));
  auto d = testing::compare_runs(single, sharded, 20);
  std::cout << "FSDP(2) bf16 vs 1 process bf16 autocast over 20 steps: max relative difference loss " << d.loss
            << ", grad_norm " << d.grad_norm << "\n";
  EXPECT_LT(d.loss, 3e-2);
}

// Each FSDP rank holds 1/N of the parameters, gradients and optimizer state.
// Measured from the tensors' storage at the log step, against DDP's full replicas.
TEST(CliFsdp, ModelStatePerRankIsAtMostAboutHalfOfDdp) {
  std::vector<std::string> common = {"--training.local_batch_size", "2", "--training.steps", "2"};
  auto fsdp = run_job(2, concat(common, degrees(1, 2)));
  auto ddp = run_job(2, concat(common, degrees(2, 1)));
  ASSERT_FALSE(fsdp.empty());
  ASSERT_FALSE(ddp.empty());
  auto state = [](const nlohmann::json& row) {
    return row["memory_params_bytes"].get<double>() + row["memory_grads_bytes"].get<double>() +
           row["memory_optimizer_bytes"].get<double>();
  };
  double f = state(fsdp.back()), d = state(ddp.back());
  std::cout << "model state per rank: FSDP(2) " << f << " bytes, DDP(2) " << d << " bytes, ratio " << f / d << "\n";
  EXPECT_GT(f, 0);
  EXPECT_LE(f, 0.55 * d);
  EXPECT_GT(fsdp.back()["memory_grads_bytes"].get<double>(), 0);  // the gradients are really there
}

TEST(CliFsdp, BadSyncModeIsAConfigError) {
  testing::TempDir dir;
  auto r = testing::run_ctitan(concat(concat({"train"}, testing::tiny_job_args(dir.path())),
                                    {"--parallelism.fsdp_gradient_sync", "sometimes"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallelism.fsdp_gradient_sync must be every_microbatch or last_microbatch"),
            std::string::npos) << r.output;
}

}  // namespace
}  // namespace ctitan
