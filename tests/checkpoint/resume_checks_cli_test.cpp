// A resume that would silently change the job is refused (issue #34, "resumes that silently
// change the job"): a checkpoint of a bigger model (its extra layers would be dropped, and the
// next save would hold the smaller model), a step count that ends before the checkpoint, and a
// step directory whose metadata names another step.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using testing::concat;
using testing::TempDir;

// The tiny job, 4 steps, a full checkpoint at step 4 (the last save is model-only by default).
std::vector<std::string> job(const TempDir& dir, const std::vector<std::string>& more) {
  return concat(concat({"train"}, testing::tiny_job_args(dir.path().string())),
                concat({"--training.steps", "4", "--checkpoint.enable", "true", "--checkpoint.interval", "4",
                        "--checkpoint.last_save_model_only", "false"},
                       more));
}

TEST(CliResumeChecks, ACheckpointOfABiggerModelIsRefusedNamingTheKey) {
  TempDir dir;
  auto first = testing::run_ctitan(job(dir, {}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto fewer = testing::run_ctitan(job(dir, {"--model.n_layers", "1", "--training.steps", "8"}));
  EXPECT_EQ(fewer.exit_code, 1) << fewer.output;  // a checkpoint error, as for a damaged checkpoint
  EXPECT_NE(fewer.output.find("holds model/layers.1."), std::string::npos) << fewer.output;
  EXPECT_NE(fewer.output.find("which this job's model does not have; the checkpoint's job had model.n_layers = 2 "
                              "(this job: 1)"),
            std::string::npos)
      << fewer.output;
  // Nothing was written over the checkpoint.
  EXPECT_FALSE(fs::exists(dir.path() / "checkpoint" / "step-8"));
  EXPECT_TRUE(fs::exists(dir.path() / "checkpoint" / "step-4"));
}

TEST(CliResumeChecks, StepsEndingBeforeTheCheckpointAreAConfigError) {
  TempDir dir;
  ASSERT_EQ(testing::run_ctitan(job(dir, {})).exit_code, 0);
  auto shorter = testing::run_ctitan(job(dir, {"--training.steps", "3"}));
  EXPECT_EQ(shorter.exit_code, 2) << shorter.output;
  EXPECT_NE(shorter.output.find("config error: training.steps 3 ends before the checkpoint's step 4"), std::string::npos)
      << shorter.output;
  // Equal is a finished job: nothing to do, exit 0.
  EXPECT_EQ(testing::run_ctitan(job(dir, {})).exit_code, 0);
}

TEST(CliResumeChecks, AStepDirectoryWhoseMetadataNamesAnotherStepIsSkipped) {
  TempDir dir;
  ASSERT_EQ(testing::run_ctitan(job(dir, {})).exit_code, 0);
  fs::copy(dir.path() / "checkpoint" / "step-4", dir.path() / "checkpoint" / "step-6", fs::copy_options::recursive);
  auto r = testing::run_ctitan(job(dir, {"--training.steps", "5"}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step-6 says it is step 4, not 6"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from checkpoint " + (dir.path() / "checkpoint" / "step-4").string()), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ctitan
