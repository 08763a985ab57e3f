// DDP through the launcher on loopback, against one process with the same global batch.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(testing::read_file(path));
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// 2 ranks x local batch 2 see windows {0, 2} and {1, 3} of each global batch of 4: the same
// samples as one process with local batch 4. The gradients differ only in summation order
// (two half sums then a Gloo all-reduce), ~1e-7 relative per step in fp32; AdamW carries these
// forward for 30 steps. 1e-4 relative on the loss and 1e-3 on the grad norm leave one to two
// orders of margin over what we measured, while a wrong weighting (say, averaging the loss
// twice) would be off by a factor of 2.
TEST(CliDdp, TwoRanksMatchOneProcessWithTheSameGlobalBatch) {
  testing::TempDir single_dir, ddp_dir;
  std::vector<std::string> common = {"--training.steps", "30", "--metrics.log_freq", "1"};
  auto single = testing::run_ctitan(
      with(with({"train"}, testing::tiny_job_args(single_dir.path())), with(common, {"--training.local_batch_size", "4"})));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  auto ddp = testing::run_ctitan(with(
      with({"run", "--nproc-per-node", "2", "--master-port", "0", "train"}, testing::tiny_job_args(ddp_dir.path())),
      with(common, {"--training.local_batch_size", "2", "--parallelism.data_parallel_replicate_degree", "2",
                    "--parallelism.data_parallel_shard_degree", "1",
                    // Housekeeping (with the leak check) at the same boundary on both ranks.
                    "--training.housekeeping_freq", "5", "--debug.check_leaks", "true"})));
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto a = read_jsonl(single_dir.file("metrics.jsonl")), b = read_jsonl(ddp_dir.file("metrics.jsonl"));
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(b.size(), 30u);
  for (size_t i = 0; i < a.size(); ++i) {
    double la = a[i]["loss"], lb = b[i]["loss"], ga = a[i]["grad_norm"], gb = b[i]["grad_norm"];
    EXPECT_NEAR(lb, la, 1e-4 * std::abs(la)) << "step " << i + 1;
    EXPECT_NEAR(gb, ga, 1e-3 * std::abs(ga)) << "step " << i + 1;
  }
  EXPECT_LT(b.back()["loss"].get<double>(), b.front()["loss"].get<double>());
  EXPECT_GE(b.back()["time_step_max_s"].get<double>(), b.back()["time_step_s"].get<double>() * 0.5);
}

// Gradient accumulation under DDP: 2 ranks x 2 microbatches of 1 (sync on the last only) equal
// one process with one batch of 4.
TEST(CliDdp, DelayedSyncAccumulationMatchesOneBigBatch) {
  testing::TempDir single_dir, ddp_dir;
  std::vector<std::string> common = {"--training.steps", "10", "--metrics.log_freq", "1"};
  auto single = testing::run_ctitan(
      with(with({"train"}, testing::tiny_job_args(single_dir.path())), with(common, {"--training.local_batch_size", "4"})));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  auto ddp = testing::run_ctitan(with(
      with({"run", "--nproc-per-node", "2", "--master-port", "0", "train"}, testing::tiny_job_args(ddp_dir.path())),
      with(common, {"--training.local_batch_size", "1", "--training.global_batch_size", "4",
                    "--parallelism.data_parallel_replicate_degree", "2", "--parallelism.data_parallel_shard_degree", "1"})));
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto a = read_jsonl(single_dir.file("metrics.jsonl")), b = read_jsonl(ddp_dir.file("metrics.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    double la = a[i]["loss"], lb = b[i]["loss"];
    EXPECT_NEAR(lb, la, 1e-4 * std::abs(la)) << "step " << i + 1;
  }
}

TEST(CliDdp, MismatchedConfigIsRefusedOnEveryRank) {
  testing::TempDir dir;
  // Rank 1 gets a different seed through its environment-specific override file.
  auto r = testing::run_ctitan(with(
      {"run", "--nproc-per-node", "2", "--master-port", "0", "--exec", "/bin/sh", "-c",
       std::string(CTITAN_BIN) + " train \"$@\" --debug.seed $((7 + RANK))", "sh"},
      with(testing::tiny_job_args(dir.path()),
           {"--parallelism.data_parallel_replicate_degree", "2", "--parallelism.data_parallel_shard_degree", "1",
            "--comm.init_timeout_seconds", "20"})), 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1's config differs from rank 0's at debug.seed (7 vs 8)"), std::string::npos)
      << r.output;
}

TEST(CliDdp, DegreesThatDoNotMatchTheWorldAreAConfigError) {
  testing::TempDir dir;
  auto r = testing::run_ctitan(with({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                    with(testing::tiny_job_args(dir.path()),
                                         {"--parallelism.data_parallel_replicate_degree", "3"})), 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("does not equal the world size 2"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ctitan
