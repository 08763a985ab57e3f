// A resume that would silently change the job is refused (issue #34, "resumes that silently
// change the job"): a checkpoint of a bigger model (its extra layers would be dropped, and the
// next save would hold the smaller model), a step count that ends before the checkpoint, a step
// directory whose metadata names another step, and another tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

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

// Token ids mean what the tokenizer says: a checkpoint saved with one tokenizer is not resumed
// with another of the same size (the embeddings and the dataloader's position would mean other
// text). The same vocabulary resumes from another path and converted to tokenizer.json.
TEST(CliResumeChecks, AnotherTokenizerIsRefusedAndTheSameVocabularyElsewhereResumes) {
  TempDir dir;
  auto tokenizer = [&](const std::string& name, unsigned seed) {
    testing::write_file(dir.file(name + ".txt"), testing::generated_corpus(200, 30, seed));
    auto r = testing::run_ctitan({"tokenizer", "train", "--input", dir.file(name + ".txt"), "--vocab-size", "300",
                                  "--output", dir.file(name + ".model")});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return dir.file(name + ".model");
  };
  const auto trained_with = tokenizer("a", 1), other = tokenizer("b", 2);
  auto with = [&](const std::string& path, const std::string& steps) {
    return job(dir, {"--model.tokenizer_path", path, "--model.vocab_size", "512", "--training.steps", steps,
                     "--checkpoint.interval", "2"});
  };
  ASSERT_EQ(testing::run_ctitan(with(trained_with, "4")).exit_code, 0);
  // Step 2 as a checkpoint written before the fingerprint: it must not be loaded in step 4's place.
  const auto step2 = dir.path() / "checkpoint" / "step-2" / "metadata.json";
  auto metadata = nlohmann::json::parse(testing::read_file(step2.string()));
  ASSERT_EQ(metadata.erase("tokenizer_fingerprint"), 1u);
  testing::write_file(step2.string(), metadata.dump());

  auto refused = testing::run_ctitan(with(other, "8"));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;  // a checkpoint error
  EXPECT_NE(refused.output.find("step-4 was saved by a job with another tokenizer"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("resumed from checkpoint"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("this job's model.tokenizer_path '" + other + "'"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("model.tokenizer_path = \"" + trained_with), std::string::npos) << refused.output;
  EXPECT_FALSE(fs::exists(dir.path() / "checkpoint" / "step-8"));
  // Generating from the checkpoint with the other tokenizer would print other text.
  auto generated = testing::run_ctitan({"generate", "--checkpoint", (dir.path() / "checkpoint" / "step-4").string(),
                                        "--tokenizer", other, "--prompt", "the", "--max-new-tokens", "2"});
  EXPECT_EQ(generated.exit_code, 1) << generated.output;
  EXPECT_NE(generated.output.find("was trained with another tokenizer"), std::string::npos) << generated.output;

  const auto converted = dir.path() / "converted";
  ASSERT_EQ(testing::run_ctitan({"tokenizer", "convert", "--tokenizer", trained_with, "--output-dir", converted.string()})
                .exit_code,
            0);
  auto resumed = testing::run_ctitan(with((converted / "tokenizer.json").string(), "8"));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from checkpoint"), std::string::npos) << resumed.output;
  EXPECT_TRUE(fs::exists(dir.path() / "checkpoint" / "step-8"));
}

}  // namespace
}  // namespace ctitan
