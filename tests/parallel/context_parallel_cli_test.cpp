// Context parallelism through the launcher on loopback, against one process with the same global
// batch (tests/support/parity.h argues the fp32 bounds): CP(2), CP(4), CP(2) x FSDP(2),
// CP(2) x HSDP(2 replicas), CP(2) x TP(2), CP(2) x PP(2), CP(2) with gradient accumulation, with full activation
// checkpointing and with grouped-query attention, Qwen3 under CP x FSDP, a long sequence, bf16,
// validation under Interleaved1F1B x CP, validation, a CP x FSDP
// checkpoint resumed in one process, a CP(2) checkpoint resumed under CP(4), and the
// configurations CP refuses.
//
// What the bounds catch here: torchtitan's CP bugs counted tokens once per cp rank in the loss
// normaliser (the loss divided by cp), or summed gradients over dp but not cp; either moves the
// loss or the grad norm by a factor, not by 1e-4.
#include <gtest/gtest.h>

#include <iostream>

#include "support/parity.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::context_parallel_cli_test {
namespace {

using testing::concat;
using testing::degrees;
using testing::expect_parity;

std::vector<std::string> cp(int degree) { return {"--parallelism.context_parallel_degree", std::to_string(degree)}; }

const std::vector<std::string> kBatch4 = {"--training.local_batch_size", "4"};
// The composed layouts run at the sequence length (1024: chunks of 256 at cp 2); the
// single-degree ones at the tiny job's 32 (chunks of 8 at cp 2, 4 at cp 4), where a chunk boundary
// is never far from any token.
const std::vector<std::string> kSeq1024 = {"--training.seq_len", "1024"};
// The ring rotation (torchtitan's alltoall); the default, allgather, runs in the other tests.
const std::vector<std::string> kRing = {"--parallelism.context_parallel_rotate_method", "alltoall"};

// Two ranks share every sequence (chunks 0 and 3, 1 and 2 of 4); FSDP over dp_shard 1 x cp 2
// sums their gradients.
TEST(CliContextParallel, Cp2MatchesOneProcess) {
  expect_parity("CP(2)", 2, concat(concat(degrees(1, 1), cp(2)), kBatch4));
}

// global_max_loss is the largest rank's own loss (its summed loss over its own tokens), as
// torchtitan's max over dp_cp: each cp rank's lies near the mean, not at a 1/cp share of it.
TEST(CliContextParallel, MaxLossIsEachRanksOwnTokensLoss) {
  auto rows = testing::run_tiny_job(2, concat(concat(degrees(1, 1), cp(2)), {"--training.steps", "3", "--metrics.log_freq", "1"}));
  int steps = 0;
  for (const auto& r : rows) {
    if (!r.contains("max_loss")) continue;
    ++steps;
    const double loss = r["loss"].get<double>(), max_loss = r["max_loss"].get<double>();
    EXPECT_GE(max_loss, loss * (1 - 1e-6)) << r.dump();  // the mean of two ranks' own losses is below their max
    EXPECT_LT(max_loss, 1.5 * loss) << r.dump();
  }
  EXPECT_EQ(steps, 3);
}

TEST(CliContextParallel, Cp4MatchesOneProcess) {
  expect_parity("CP(4)", 4, concat(concat(degrees(1, 1), cp(4)), kBatch4));
}

// 2 x 2: the data splits over dp_shard only (both cp ranks of a dp rank read the same batch),
// FSDP shards over all four ranks.
TEST(CliContextParallel, FsdpTwoByCpTwoMatchesOneProcess) {
  expect_parity("FSDP(2)xCP(2) seq 1024", 4,
                concat(concat(degrees(1, 2), cp(2)), concat(kSeq1024, {"--training.local_batch_size", "2"})),
                concat(kSeq1024, kBatch4));
}

// HSDP: replicas over dp_replicate, each sharded over its cp ranks (dp_shard is 1, so the mesh
// has no dp_shard dimension and FSDP's group is cp alone).
TEST(CliContextParallel, HsdpTwoReplicasByCpTwoMatchesOneProcess) {
  expect_parity("HSDP(2x1)xCP(2)", 4, concat(concat(degrees(2, 1), cp(2)), {"--training.local_batch_size", "2"}));
}

// TP's sequence parallelism splits each cp rank's T / 2 tokens; attention sees a cp rank's
// tokens with the tp rank's heads.
TEST(CliContextParallel, CpTwoByTpTwoMatchesOneProcess) {
  expect_parity("CP(2)xTP(2) seq 1024", 4, concat(concat(degrees(1, 1, 2), cp(2)), concat(kSeq1024, kBatch4)),
                concat(kSeq1024, kBatch4));
}

// Each stage's ranks hold T / 2 tokens between stages; the stage boundary carries them. The ring
// rotation's point-to-point traffic shares the process with the pipeline's.
TEST(CliContextParallel, CpTwoByPpTwoMatchesOneProcess) {
  expect_parity("CP(2)xPP(2) ring seq 1024", 4,
                concat(concat(concat(degrees(1, 1), cp(2)), concat(kRing, kSeq1024)),
                       {"--training.local_batch_size", "4", "--parallelism.pipeline_parallel_degree", "2",
                        "--parallelism.pipeline_parallel_schedule", "1F1B"}),
                concat(kSeq1024, kBatch4));
}

// Two microbatches of 2 against one batch of 4, full AC (the recomputed forward runs the ring
// again inside backward), and GQA (keys and values travel with 2 heads for 4 query heads).
TEST(CliContextParallel, AccumulationCheckpointingAndGqaMatchOneProcess) {
  const std::vector<std::string> gqa = {"--model.n_kv_heads", "2"};
  expect_parity("CP(2) ring, 2 microbatches, AC full, GQA", 2,
                concat(concat(concat(degrees(1, 1), cp(2)), kRing),
                       concat(gqa, {"--training.local_batch_size", "2", "--training.global_batch_size", "4",
                                    "--activation_checkpoint.mode", "full"})),
                concat(gqa, kBatch4));
}

// Qwen3's attention (QK-norm before RoPE, head_dim 32 apart from dim / n_heads, 2 kv heads) under
// CP(2) x FSDP(2): the family's own attention takes the ring as Llama's does.
TEST(CliContextParallel, Qwen3FsdpTwoByCpTwoMatchesOneProcess) {
  const std::vector<std::string> qwen3 = {"--model.name", "qwen3", "--model.flavor", "debugmodel", "--model.hidden_dim",
                                          "128"};
  expect_parity("Qwen3 FSDP(2)xCP(2)", 4,
                concat(qwen3, concat(concat(degrees(1, 2), cp(2)), {"--training.local_batch_size", "2"})),
                concat(qwen3, kBatch4));
}

// Operator-level selective AC keeps the matmul and SDPA outputs of the first forward and replays
// them in the recompute; ring attention is not one of those ops, so the recompute runs the ring
// (and its communication) again, which must give the same values.
TEST(CliContextParallel, OpSelectiveCheckpointingMatchesOneProcess) {
  expect_parity("FSDP(2)xCP(2) op SAC", 4,
                concat(concat(degrees(1, 2), cp(2)),
                       {"--training.local_batch_size", "2", "--activation_checkpoint.mode", "selective",
                        "--activation_checkpoint.selective_ac_option", "op"}));
}

// A 1024-token sequence over 4 ranks: 8 chunks of 128, with each rotation.
TEST(CliContextParallel, Cp4AtSequence1024MatchesOneProcessWithEitherRotation) {
  const std::vector<std::string> long_seq = {"--training.seq_len", "1024", "--training.local_batch_size", "2"};
  auto single = testing::run_tiny_job(1, concat(testing::kThirtySteps, long_seq));
  for (const std::string method : {"allgather", "alltoall"}) {
    auto sharded = testing::run_tiny_job(
        4, concat(testing::kThirtySteps,
                  concat(concat(degrees(1, 1), cp(4)),
                         concat(long_seq, {"--parallelism.context_parallel_rotate_method", method}))));
    auto d = testing::compare_runs(single, sharded, 30);
    std::cout << "CP(4) " << method << " seq 1024 vs 1 process: max relative difference loss " << d.loss
              << ", grad_norm " << d.grad_norm << "\n";
    EXPECT_LT(d.loss, 1e-4) << method;
    EXPECT_LT(d.grad_norm, 1e-3) << method;
  }
}

// Each cp rank evaluates its chunks; the losses add up over dp x cp and the tokens are counted
// once (over dp): the validation loss equals one process's.
TEST(CliContextParallel, ValidationLossEqualsOneProcess) {
  const std::vector<std::string> job = {"--training.steps", "4", "--validation.enable", "--validation.freq", "2",
                                        "--validation.steps", "2"};
  auto one = testing::validation_losses(testing::run_tiny_job(1, concat(job, kBatch4)));
  auto cp2 = testing::validation_losses(
      testing::run_tiny_job(4, concat(job, concat(concat(degrees(1, 2), cp(2)), {"--training.local_batch_size", "2"}))));
  ASSERT_EQ(one.size(), 2u);
  ASSERT_EQ(cp2.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(cp2[i], one[i], 1e-4 * one[i]) << "validation " << i;
}

// Interleaved1F1B (two stages per rank) over CP(2) ranks, validating: the stages forward each
// cp rank's chunks in turn, and the last stage's sums add up over dp x cp (and pp).
TEST(CliContextParallel, InterleavedPipelineValidationEqualsOneProcess) {
  const std::vector<std::string> job = {"--training.steps", "4", "--validation.enable", "--validation.freq", "2",
                                        "--validation.steps", "2", "--training.local_batch_size", "4"};
  auto one = testing::validation_losses(testing::run_tiny_job(1, job));
  auto pp_cp = testing::validation_losses(testing::run_tiny_job(
      4, concat(job, concat(concat(degrees(1, 1), cp(2)), {"--parallelism.pipeline_parallel_degree", "2",
                                                            "--parallelism.pipeline_parallel_schedule", "Interleaved1F1B"}))));
  ASSERT_EQ(one.size(), 2u);
  ASSERT_EQ(pp_cp.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(pp_cp[i], one[i], 1e-4 * one[i]) << "validation " << i;
}

// bf16: FSDP over the cp ranks computes in bf16 parameters, one process under bf16 autocast; both
// round at bf16's resolution (2^-8 ~ 4e-3) at different points, so the bound is 3e-2 relative on
// the loss over 10 steps, as for TP's bf16 test. A token counted twice moves the loss by 2x.
TEST(CliContextParallel, Bf16StaysCloseToOneProcess) {
  const std::vector<std::string> bf16 = {"--training.mixed_precision_param", "bfloat16", "--training.steps", "10",
                                         "--metrics.log_freq", "1", "--training.local_batch_size", "4"};
  auto single = testing::run_tiny_job(1, bf16);
  auto cp2 = testing::run_tiny_job(2, concat(bf16, concat(degrees(1, 1), cp(2))));
  auto d = testing::compare_runs(single, cp2, 10);
  std::cout << "CP(2) bf16 vs 1 process bf16 autocast over 10 steps: max relative difference loss " << d.loss << "\n";
  EXPECT_LT(d.loss, 3e-2);
}

// A CP(2) x FSDP(2) checkpoint (FSDP shards over the four ranks) resumed by one process: the
// resumed steps match the uninterrupted one-process run (fp32 bound of parity.h).
TEST(CliContextParallel, CheckpointResumesInOneProcess) {
  testing::TempDir dir;
  const std::vector<std::string> common = {"--training.steps", "8", "--metrics.log_freq", "1", "--checkpoint.enable",
                                           "--checkpoint.interval", "4", "--checkpoint.last_save_model_only", "false"};
  auto one = testing::run_tiny_job(1, concat(common, kBatch4));
  // Four ranks stop after step 4 (their checkpoint); one process resumes from it in the same folder.
  auto first = testing::run_ctitan(
      concat(concat({"run", "--nproc-per-node", "4", "--master-port", "0", "train"}, testing::tiny_job_args(dir.path())),
             concat(concat(common, {"--training.steps", "4", "--training.local_batch_size", "2"}),
                    concat(degrees(1, 2), cp(2)))),
      240);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto resumed = testing::run_ctitan(concat(concat({"train"}, testing::tiny_job_args(dir.path())), concat(common, kBatch4)),
                                     240);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from checkpoint"), std::string::npos) << resumed.output;
  EXPECT_EQ(testing::first_logged_step(resumed.output), 5) << resumed.output;
  // metrics.jsonl holds the four ranks' steps 1-4, then the resumed process's 5-8.
  EXPECT_EQ(testing::expect_losses_match_by_step(testing::read_jsonl(dir.file("metrics.jsonl")), one), 8);
}

// A CP(2) checkpoint (FSDP over the two cp ranks) resumed under CP(4): FSDP's shards reshard
// from 2 to 4 ranks, and the loader's state (per dp rank, the same for every cp rank) carries over.
TEST(CliContextParallel, CheckpointReshardsFromCp2ToCp4) {
  testing::TempDir dir;
  const std::vector<std::string> common = {"--training.steps", "8", "--metrics.log_freq", "1", "--checkpoint.enable",
                                           "--checkpoint.interval", "4", "--checkpoint.last_save_model_only", "false",
                                           "--training.local_batch_size", "4"};
  auto one = testing::run_tiny_job(1, common);
  auto launch = [&](int nproc, const std::vector<std::string>& extra) {
    return testing::run_ctitan(concat(concat({"run", "--nproc-per-node", std::to_string(nproc), "--master-port", "0", "train"},
                                             testing::tiny_job_args(dir.path())),
                                      concat(common, concat(degrees(1, 1), extra))),
                               240);
  };
  auto first = launch(2, concat(cp(2), {"--training.steps", "4"}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto resumed = launch(4, cp(4));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(testing::first_logged_step(resumed.output), 5) << resumed.output;
  EXPECT_EQ(testing::expect_losses_match_by_step(testing::read_jsonl(dir.file("metrics.jsonl")), one), 8);
}

TEST(CliContextParallel, ASequenceNotCutIntoTwoChunksPerRankIsRefusedNamingTheKey) {
  testing::TempDir dir;
  auto r = testing::run_ctitan(concat(concat({"train"}, testing::tiny_job_args(dir.path())),
                                      concat(cp(4), {"--training.seq_len", "36"})));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training.seq_len 36 is not divisible by 2 x parallelism.context_parallel_degree (4)"),
            std::string::npos)
      << r.output;
}

TEST(CliContextParallel, ADegreeThatDoesNotDivideTheWorldIsRefused) {
  testing::TempDir dir;
  auto r = testing::run_ctitan(concat(concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                             testing::tiny_job_args(dir.path())),
                                      concat(degrees(1, 1), cp(4))),
                               120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("context_parallel_degree (4)"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ctitan::context_parallel_cli_test
