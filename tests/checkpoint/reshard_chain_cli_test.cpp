// Checkpoints saved under one parallel layout resume under another, FSDP included: a chain of
// runs, each resuming from the checkpoint the previous one left, against one uninterrupted run.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

using testing::concat;
using Args = std::vector<std::string>;

struct Layout {
  std::string name;
  int nproc;
  Args args;
};

Args layout_degrees(int replicate, int shard, int local_batch, int tp = 1) {
  return {"--parallelism.data_parallel_replicate_degree", std::to_string(replicate),
          "--parallelism.data_parallel_shard_degree", std::to_string(shard), "--training.local_batch_size",
          std::to_string(local_batch), "--parallelism.tensor_parallel_degree", std::to_string(tp)};
}

// A global batch of 12 divides over every layout below. A constant LR after warmup
// (decay_ratio 0) makes training.steps only the point where a run stops, so a run that stops at
// step 4 and one that goes on to 20 take the same steps.
const Args kReshardJob = {"--training.global_batch_size", "12", "--lr_scheduler.decay_ratio", "0", "--metrics.log_freq", "1",
                   "--checkpoint.enable", "true", "--checkpoint.interval", "4",
                   "--checkpoint.last_save_model_only", "false"};

const Layout kOne{"1 process", 1, {"--training.local_batch_size", "12"}};
const Layout kFsdp2{"FSDP(2)", 2, layout_degrees(1, 2, 6)};
const Layout kFsdp3{"FSDP(3)", 3, layout_degrees(1, 3, 4)};
const Layout kFsdp4{"FSDP(4)", 4, layout_degrees(1, 4, 3)};
const Layout kHsdp{"HSDP(2x2)", 4, layout_degrees(2, 2, 3)};
const Layout kDdp2{"DDP(2)", 2, layout_degrees(2, 1, 6)};
// TP ranks of a group share their batch: TP(2) is one data-parallel rank of 12.
const Layout kTp2{"TP(2)", 2, layout_degrees(1, 1, 12, 2)};
const Layout kFsdp2Tp2{"FSDP(2)xTP(2)", 4, layout_degrees(1, 2, 6, 2)};
// Pipeline stages share their batch too: PP(2) is one data-parallel rank of 12, in 4
// microbatches of 3. Each rank saves only its stage's FQNs.
const Layout kPp2{"PP(2)", 2,
                  {"--parallelism.pipeline_parallel_degree", "2", "--training.local_batch_size", "12",
                   "--parallelism.pipeline_parallel_microbatch_size", "3"}};
// [pp, dp_shard]: each stage's FQNs, sharded over its FSDP pair; dp ranks of 6 in microbatches of 3.
const Layout kPp2Fsdp2{"PP(2)xFSDP(2)", 4,
                       concat(layout_degrees(1, 2, 6), {"--parallelism.pipeline_parallel_degree", "2",
                                                 "--parallelism.pipeline_parallel_microbatch_size", "3"})};

struct RunLosses {
  std::map<int64_t, double> losses;  // step -> loss, every row of metrics.jsonl (earlier runs' too)
  int64_t first_step = -1;           // the first step this run trained
};

RunLosses run_layout(const std::filesystem::path& dir, const Layout& layout, int64_t steps, const Args& model) {
  Args head = {"train"};
  if (layout.nproc > 1) head = {"run", "--nproc-per-node", std::to_string(layout.nproc), "--master-port", "0", "train"};
  auto r = testing::run_ctitan(
      concat(concat(head, testing::tiny_job_args(dir)),
             concat(concat(concat(kReshardJob, model), layout.args), {"--training.steps", std::to_string(steps)})), 240);
  EXPECT_EQ(r.exit_code, 0) << layout.name << "\n" << r.output;
  RunLosses out;
  for (const auto& row : testing::read_jsonl((dir / "metrics.jsonl").string())) {
    if (row.contains("loss")) out.losses[row["step"].get<int64_t>()] = row["loss"].get<double>();
  }
  out.first_step = testing::first_logged_step(r.output);
  return out;
}

// Each layout in `chain` trains 4 more steps from the previous one's checkpoint. Layouts differ
// from one process only in summation order (<= 5e-7 relative over 30 steps, CliFsdp.*), so the
// 1e-4 relative bound of those tests applies; resuming with a wrong shard, lost optimizer moments
// or a skipped or repeated sample moves the loss by percents. `model`: the tiny job's Llama, or
// flags that make it another family.
void expect_chain_matches_one_run(const std::vector<Layout>& chain, const Args& model = {}) {
  const int64_t steps = 4 * int64_t(chain.size());
  testing::TempDir reference_dir, chain_dir;
  auto reference = run_layout(reference_dir.path(), kOne, steps, model).losses;
  ASSERT_EQ(reference.size(), size_t(steps));
  double worst = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    auto result = run_layout(chain_dir.path(), chain[i], 4 * int64_t(i + 1), model);
    ASSERT_EQ(result.first_step, 4 * int64_t(i) + 1) << chain[i].name << " did not resume";
    ASSERT_EQ(result.losses.size(), 4 * (i + 1)) << chain[i].name;  // earlier layouts' rows are kept
    for (int64_t step = 4 * int64_t(i) + 1; step <= 4 * int64_t(i + 1); ++step) {
      double loss = result.losses.at(step);
      EXPECT_NEAR(loss, reference[step], 1e-4 * reference[step]) << chain[i].name << " step " << step;
      worst = std::max(worst, std::abs(loss - reference[step]) / reference[step]);
    }
  }
  std::string names;
  for (const auto& l : chain) names += (names.empty() ? "" : " -> ") + l.name;
  std::cout << names << ": max relative loss difference from one uninterrupted process " << worst << "\n";
}

// HSDP(2x2) -> FSDP(4) -> FSDP(2) -> 1 process -> FSDP(3): four reshards in one chain,
// with uneven shards (a 32-row vocab over 3 ranks is 11 + 11 + 10 rows) and dp degrees 4, 2, 1, 3.
TEST(CliCheckpointReshard, FsdpLayoutChainMatchesOneRun) {
  expect_chain_matches_one_run({kHsdp, kFsdp4, kFsdp2, kOne, kFsdp3});
}

TEST(CliCheckpointReshard, FsdpResumesAsDdp) { expect_chain_matches_one_run({kFsdp2, kDdp2}); }

// Tensor-parallel checkpoints: TP slices (rows of column-wise weights, columns of row-wise ones)
// and FSDP rows of those slices, saved under the global FQNs and shapes, resume as FSDP, as one
// process, and back: TP(2) -> FSDP(2)xTP(2) -> FSDP(2) -> 1 process -> TP(2).
TEST(CliCheckpointReshard, TpLayoutChainMatchesOneRun) {
  expect_chain_matches_one_run({kTp2, kFsdp2Tp2, kFsdp2, kOne, kTp2});
}

// Pipeline checkpoints: each stage's parameters and optimizer state under their unsharded FQNs;
// the union is the model. PP(2) -> 1 process -> PP(2) -> FSDP(2) -> PP(2)xFSDP(2) -> PP(2).
TEST(CliCheckpointReshard, PpLayoutChainMatchesOneRun) {
  expect_chain_matches_one_run({kPp2, kOne, kPp2, kFsdp2, kPp2Fsdp2, kPp2});
}

// Qwen3 (QK-norm weights: FSDP rows, whole under TP; head_dim apart from dim / n_heads):
// HSDP(2x2) -> FSDP(2)xTP(2) -> 1 process -> PP(2).
TEST(CliCheckpointReshard, Qwen3LayoutChainMatchesOneRun) {
  expect_chain_matches_one_run({kHsdp, kFsdp2Tp2, kOne, kPp2},
                               {"--model.name", "qwen3", "--model.flavor", "debugmodel", "--model.hidden_dim", "128"});
}

}  // namespace
}  // namespace ctitan
