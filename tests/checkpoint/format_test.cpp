// The on-disk format's guarantees: checksums catch truncation, bit flips and missing files, each
// error naming the file; metadata is the commit point; retention never removes the newest.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "ctitan/checkpoint/coordinator.h"
#include "ctitan/checkpoint/metadata.h"
#include "ctitan/common/atomic_file.h"
#include "ctitan/checkpoint/model_io.h"
#include "ctitan/checkpoint/reader.h"
#include "ctitan/checkpoint/retention.h"
#include "ctitan/checkpoint/sharded_save.h"
#include "ctitan/common/error.h"
#include "support/test_support.h"

namespace ctitan::checkpoint {
namespace {

namespace fs = std::filesystem;

std::map<std::string, StateDict> sample_state() {
  torch::manual_seed(3);
  return {{"model", {{"a", torch::randn({64, 8})}, {"b", torch::randn({8}).to(torch::kBFloat16)}}},
          {"train_state", {{"step", torch::tensor(int64_t(5))}}},
          {"dataloader", {{"buffer", torch::arange(10, torch::kInt)}}}};
}

fs::path save_sample(const fs::path& folder, int64_t step) {
  auto dir = folder / step_dir_name(step);
  auto c = local_coordinator();
  save(*c, {dir, step, false, "cfg", 0, 1}, local_slices(sample_state(), {}, 0));
  return dir;
}

std::string checkpoint_load_error(const fs::path& dir) {
  try {
    CheckpointReader(dir).verify_all();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointFormat, RoundTripsEveryDtypeBitwise) {
  testing::TempDir dir;
  auto step = save_sample(dir.path(), 5);
  EXPECT_TRUE(fs::exists(step / kMetadataFile));
  EXPECT_FALSE(fs::exists(step / "metadata.json.tmp"));
  CheckpointReader reader(step);
  auto state = sample_state();
  for (const auto& [part, dict] : state) {
    for (const auto& [key, t] : dict) {
      auto back = reader.read_whole(part, key, part == "dataloader" ? 0 : -1);
      EXPECT_EQ(back.scalar_type(), t.scalar_type()) << key;
      EXPECT_TRUE(torch::equal(back, t)) << key;
    }
  }
  EXPECT_EQ(reader.metadata().step, 5);
  EXPECT_EQ(reader.metadata().config_hash, config_hash("cfg"));
  // Pinned: the value every earlier checkpoint stores for this text (FNV-1a 64 from the offset
  // 1469598103934665603, computed independently in Python); a change would make every resume
  // report "saved with another config".
  EXPECT_EQ(config_hash("cfg"), "cf56bb510346f0af");
}

TEST(CheckpointFormat, BitFlipTruncationAndMissingFilesAreDetectedNamingTheFile) {
  testing::TempDir dir;
  auto step = save_sample(dir.path(), 1);
  auto file = step / "rank-00000.bin";
  ASSERT_EQ(checkpoint_load_error(step), "");

  std::string bytes = testing::read_file(file);
  std::string flipped = bytes;
  flipped[100] = char(flipped[100] ^ 0x01);  // one bit inside model/a
  testing::write_file(file, flipped);
  auto error = checkpoint_load_error(step);
  EXPECT_NE(error.find("checksum mismatch"), std::string::npos) << error;
  EXPECT_NE(error.find(file.string()), std::string::npos) << error;

  testing::write_file(file, bytes.substr(0, bytes.size() - 3));
  error = checkpoint_load_error(step);
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  EXPECT_NE(error.find(file.string()), std::string::npos) << error;

  fs::remove(file);
  error = checkpoint_load_error(step);
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
  EXPECT_NE(error.find(file.string()), std::string::npos) << error;

  fs::remove(step / kMetadataFile);
  error = checkpoint_load_error(step);
  EXPECT_NE(error.find("not a complete checkpoint"), std::string::npos) << error;
}

// Found by fuzz/checkpoint_metadata_fuzzer: metadata.json values the reader would misuse (a float
// where an int goes is undefined behaviour in the conversion; a slice outside its tensor or a
// dp_rank_of shorter than world_size is read out of bounds) are refused when read, naming the file.
TEST(CheckpointFormat, MalformedMetadataIsAnInputErrorNamingTheFile) {
  testing::TempDir dir;
  auto step = save_sample(dir.path(), 1);
  const auto path = step / kMetadataFile;
  const auto good = nlohmann::json::parse(testing::read_file(path));
  ASSERT_NO_THROW(read_metadata(step));
  size_t a = 0;  // the entry of model/a, shape [64, 8]
  while (good["entries"][a]["key"] != "a") ++a;
  auto expect_refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& detail) {
    auto j = good;
    edit(j);
    testing::write_file(path, j.dump());
    try {
      read_metadata(step);
      ADD_FAILURE() << "accepted: " << detail;
    } catch (const InputError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(path.string()), std::string::npos) << message;
      EXPECT_NE(message.find(detail), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  };
  expect_refused([](auto& j) { j["version"] = 1e300; }, "\"version\" must be an integer");
  expect_refused([](auto& j) { j["world_size"] = 1.5; }, "\"world_size\" must be an integer");
  expect_refused([a](auto& j) { j["entries"][a]["crc32"] = int64_t(1) << 40; }, "\"crc32\" must be an integer");
  expect_refused([a](auto& j) { j["entries"][a]["shape"] = {-1, 8}; }, "\"shape\" must be a list of integers >= 0");
  expect_refused([a](auto& j) { j["entries"][a]["offsets"] = {int64_t(1) << 62, 0}; }, "outside the global shape");
  expect_refused([a](auto& j) { j["entries"][a]["offsets"] = {INT64_MAX, 0}; }, "outside the global shape");
  expect_refused([a](auto& j) { j["entries"][a]["global_shape"] = {int64_t(1) << 62, int64_t(1) << 62}; },
                 "is too large");
  expect_refused([a](auto& j) { j["entries"][a]["nbytes"] = 3; }, "nbytes is 3");
  expect_refused([a](auto& j) { j["entries"][a]["dtype"] = "float\n8"; }, "unknown dtype 'float\\n8'");
  expect_refused([](auto& j) { j["dp_rank_of"] = nlohmann::json::array(); }, "\"dp_rank_of\" has 0 ranks");
}

// A write the system refuses is an IoError (not the user's input), naming the path; bad bytes on
// disk are an InputError. Here the target directory does not exist.
TEST(CheckpointFormat, AFailedWriteIsAnIoErrorNamingThePath) {
  testing::TempDir dir;
  auto path = dir.path() / "missing" / "metadata.json";
  try {
    write_file_atomically(path, "{}");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path() / "missing").string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(entry_dtype("complex64", "x.json"), InputError);
}

TEST(CheckpointFormat, KeepLatestKNeverRemovesTheNewestComplete) {
  testing::TempDir dir;
  for (int64_t s : {10, 20, 30, 40}) save_sample(dir.path(), s);
  fs::create_directories(dir.path() / "step-25");  // a crashed save: no metadata
  fs::create_directories(dir.path() / "step-50");  // a save in progress
  purge_old_checkpoints(dir.path(), 2);
  auto left = list_step_dirs(dir.path());
  EXPECT_EQ(left.complete, (std::vector<int64_t>{30, 40}));
  EXPECT_EQ(left.incomplete, (std::vector<int64_t>{50}));
  purge_old_checkpoints(dir.path(), 0);  // 0 keeps all
  EXPECT_EQ(list_step_dirs(dir.path()).complete.size(), 2u);
  purge_old_checkpoints(dir.path(), 1);
  EXPECT_EQ(list_step_dirs(dir.path()).complete, (std::vector<int64_t>{40}));
}

TEST(CheckpointFormat, ModelIoRoundTripsAModelOnlyCheckpoint) {
  testing::TempDir dir;
  StateDict model = {{"tok_embeddings.weight", torch::randn({32, 4})}, {"norm.weight", torch::ones({4})}};
  save_model_only_checkpoint(dir.path() / "step-0", model, config::JobConfig{});
  auto back = load_full_model_state(dir.path() / "step-0");
  ASSERT_EQ(back.size(), model.size());
  for (const auto& [key, t] : model) EXPECT_TRUE(torch::equal(back.at(key), t)) << key;
  EXPECT_TRUE(CheckpointReader(dir.path() / "step-0").metadata().model_only);
}

TEST(CheckpointFormat, StepDirNames) {
  EXPECT_EQ(parse_step_dir_name("step-120").value_or(-1), 120);
  EXPECT_FALSE(parse_step_dir_name("step-").has_value());
  EXPECT_FALSE(parse_step_dir_name("step-1x").has_value());
  EXPECT_FALSE(parse_step_dir_name("steps-1").has_value());
}

}  // namespace
}  // namespace ctitan::checkpoint
