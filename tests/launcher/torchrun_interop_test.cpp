// ctitan's workers under PyTorch's own launcher: `torchrun --no-python ctitan train` (the venv's
// torchrun, with its agent-hosted TCPStore) trains the same 2-rank FSDP job as `ctitan run`, to
// the same losses.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

std::map<int64_t, double> losses(const std::string& dump_folder) {
  std::map<int64_t, double> out;
  for (const auto& row : testing::read_jsonl((fs::path(dump_folder) / "metrics.jsonl").string())) {
    if (row.contains("loss")) out[row["step"].get<int64_t>()] = row["loss"].get<double>();
  }
  return out;
}

// The two runs execute the same program with the same ranks, seeds, data and thread count
// (CTITAN_NUM_THREADS=1 from ctest), so their arithmetic is identical; the 1e-6 relative bound
// only allows for printing. A launcher that mixed up RANK, WORLD_SIZE or the store would fail
// to start, or shard the data differently and move the loss by far more.
TEST(CliTorchrun, CtitanTrainUnderTorchrunMatchesCtitanRun) {
  if (!testing::have_python()) GTEST_SKIP() << "no venv Python: torchrun comes from the torch wheel";
  const std::string torchrun = (fs::path(CTITAN_PYTHON).parent_path() / "torchrun").string();
  testing::TempDir tmp;
  const std::vector<std::string> job = {"--training.steps", "6", "--metrics.log_freq", "2"};
  auto under_torchrun = testing::run_program(
      torchrun, testing::concat(testing::concat({"--standalone", "--nproc-per-node", "2", "--no-python", CTITAN_BIN,
                                                 "train"},
                                                testing::tiny_job_args(tmp.file("torchrun"))),
                                job),
      240);
  ASSERT_EQ(under_torchrun.exit_code, 0) << under_torchrun.output;
  auto under_ctitan = testing::run_ctitan(
      testing::concat(testing::concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                      testing::tiny_job_args(tmp.file("ctitan"))),
                      job),
      240);
  ASSERT_EQ(under_ctitan.exit_code, 0) << under_ctitan.output;
  auto a = losses(tmp.file("torchrun")), b = losses(tmp.file("ctitan"));
  ASSERT_EQ(a.size(), 3u) << under_torchrun.output;
  ASSERT_EQ(b.size(), 3u) << under_ctitan.output;
  for (const auto& [step, loss] : a) {
    ASSERT_TRUE(b.count(step)) << step;
    EXPECT_NEAR(loss, b[step], 1e-6 * std::abs(b[step])) << "step " << step;
  }
}

}  // namespace
}  // namespace ctitan
