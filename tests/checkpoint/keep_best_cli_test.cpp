// checkpoint.keep_best: the step with the lowest validation loss is saved (whatever the interval),
// recorded in best.json and kept by retention; `checkpoint export --best` exports it.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "ctitan/checkpoint/metadata.h"
#include "ctitan/checkpoint/retention.h"
#include "ctitan/data/token_file.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

// Training data cycles 0..15; validation data is uniform random tokens. The more confidently the
// model predicts the cycle, the worse it does on random tokens, so the validation loss falls
// first and then rises: the best step is neither the first nor the last, and retention must keep
// it while keep_latest_k = 1 removes its neighbours.
TEST(CliCheckpoint, KeepBestKeepsTheLowestValidationLossAndExportsIt) {
  testing::TempDir tmp;
  auto dump = tmp.file("run");
  auto args = testing::tiny_job_args(dump);  // creates the folder and the training data
  const auto validation_data = tmp.file("random.bin");
  {
    data::TokenFileWriter writer(validation_data, 32);
    std::mt19937 rng(3);
    std::vector<int32_t> tokens(4000);
    for (auto& t : tokens) t = int32_t(rng() % 32);
    writer.append(tokens);
    writer.finish();
  }
  auto r = testing::run_ctitan(
      testing::concat(testing::concat({"train"}, args),
                      {"--training.steps", "40", "--validation.enable", "--validation.freq", "4", "--validation.steps",
                       "2", "--validation.dataset_path", validation_data, "--checkpoint.enable", "--checkpoint.interval",
                       "10", "--checkpoint.keep_latest_k", "1", "--checkpoint.keep_best",
                       "--checkpoint.no_last_save_model_only"}),
      240);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  int64_t best_step = -1;
  double best_loss = 1e300;
  for (const auto& row : testing::read_jsonl((fs::path(dump) / "metrics.jsonl").string())) {
    if (!row.contains("validation_loss")) continue;
    double loss = row["validation_loss"].get<double>();
    if (loss < best_loss) best_loss = loss, best_step = row["step"].get<int64_t>();
  }
  ASSERT_GT(best_step, 0);
  ASSERT_NE(best_step, 40) << "the validation loss did not rise again; the test no longer exercises retention";
  const fs::path folder = fs::path(dump) / "checkpoint";
  auto best = checkpoint::read_best(folder);
  EXPECT_EQ(best.step, best_step);
  EXPECT_NEAR(best.validation_loss, best_loss, 1e-9 * best_loss);
  auto dirs = checkpoint::list_step_dirs(folder);
  EXPECT_EQ(dirs.complete, (std::vector<int64_t>{best_step, 40})) << "the best and the newest, nothing else";

  auto exported = testing::run_ctitan({"checkpoint", "export", "--input", folder.string(), "--best", "--output",
                                       tmp.file("hf")},
                                      120);
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_NE(exported.output.find(checkpoint::step_dir_name(best_step)), std::string::npos) << exported.output;
  EXPECT_TRUE(fs::exists(fs::path(tmp.file("hf")) / "config.json")) << exported.output;
}

}  // namespace
}  // namespace ctitan
