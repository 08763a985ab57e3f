// TensorBoard output checked with the tensorboard package's own reader: every tag torchtitan
// writes (plus ctitan's communication split) at every log step, with metrics.jsonl's values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "ctitan/metrics/tensorboard_writer.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

// The CRC-32C check value of the standard "123456789" test vector (RFC 3720, B.4).
TEST(TensorBoardWriter, Crc32cMatchesTheStandardCheckValue) {
  EXPECT_EQ(metrics::crc32c("123456789", 9), 0xE3069283u);
}

// Reads `dir` with tensorboard's EventAccumulator (tests/metrics/read_tensorboard.py).
nlohmann::json read_scalars(const testing::TempDir& tmp, const std::string& dir) {
  auto out = tmp.file("scalars.json");
  auto r = testing::run_python({std::string(CTITAN_SOURCE_DIR) + "/tests/metrics/read_tensorboard.py", dir, out});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(testing::read_file(out));
}

TEST(TensorBoardWriter, ScalarsReadBackWithTensorboardsReader) {
  if (!testing::have_python()) GTEST_SKIP() << "no venv Python: the tensorboard package is the reference";
  testing::TempDir tmp;
  {
    metrics::TensorBoardWriter writer(tmp.file("tb"));
    for (int64_t step : {1, 2, 10}) writer.add_scalar("loss_metrics/global_avg_loss", 10.0 / double(step), step);
    writer.add_scalar("mfu(%)", 0.125, 10);
  }
  auto scalars = read_scalars(tmp, tmp.file("tb"));
  ASSERT_TRUE(scalars.contains("loss_metrics/global_avg_loss")) << scalars.dump();
  auto loss = scalars["loss_metrics/global_avg_loss"];
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_EQ(loss[2][0].get<int64_t>(), 10);
  // simple_value is a float; these values are exact in one.
  EXPECT_EQ(loss[1][1].get<double>(), 5.0);
  EXPECT_EQ(loss[2][1].get<double>(), 1.0);
  EXPECT_EQ(scalars["mfu(%)"][0][1].get<double>(), 0.125);
}

// A training run with enable_tensorboard: the events under dump_folder/tb/<timestamp>/ hold every
// tag at every log step, equal to the metrics.jsonl row to float precision (TensorBoard stores
// floats: relative error <= 2^-24 ~ 6e-8; 1e-6 leaves room for printing).
TEST(CliTensorBoard, TrainingWritesTorchtitansTagsWithTheJsonlValues) {
  if (!testing::have_python()) GTEST_SKIP() << "no venv Python: the tensorboard package is the reference";
  testing::TempDir tmp;
  auto dump = tmp.file("run");
  auto r = testing::run_ctitan(testing::concat(testing::concat({"train"}, testing::tiny_job_args(dump)),
                                               {"--training.steps", "6", "--metrics.log_freq", "2",
                                                "--metrics.enable_tensorboard", "--validation.enable",
                                                "--validation.freq", "3", "--validation.steps", "1"}),
                               180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<fs::path> runs;
  for (const auto& entry : fs::directory_iterator(fs::path(dump) / "tb")) runs.push_back(entry.path());
  ASSERT_EQ(runs.size(), 1u) << "one YYYYmmdd-HHMM folder per run";
  auto scalars = read_scalars(tmp, runs[0].string());

  std::map<int64_t, nlohmann::json> rows;
  for (const auto& row : testing::read_jsonl((fs::path(dump) / "metrics.jsonl").string())) {
    if (row.contains("loss")) rows[row["step"].get<int64_t>()] = row;
  }
  ASSERT_EQ(rows.size(), 3u);  // steps 2, 4, 6
  // One process: its own tokens are the whole batch, so the largest rank loss is the loss.
  for (const auto& [step, row] : rows) EXPECT_EQ(row["max_loss"], row["loss"]) << step;
  const std::vector<std::pair<std::string, std::string>> tag_to_key = {
      {"loss_metrics/global_avg_loss", "loss"}, {"loss_metrics/global_max_loss", "max_loss"},
      {"grad_norm", "grad_norm"}, {"lr", "lr"},
      {"throughput(tps)", "tps"}, {"tflops", "tflops"}, {"mfu(%)", "mfu"},
      {"time_metrics/end_to_end(s)", "time_step_s"}, {"time_metrics/data_loading(s)", "time_data_s"},
      {"comm/exposed(s)", "comm_exposed_s"}, {"comm/bytes_per_step", "comm_bytes_per_step"}};
  for (const auto& [tag, key] : tag_to_key) {
    ASSERT_TRUE(scalars.contains(tag)) << tag << " missing from " << scalars.dump();
    ASSERT_EQ(scalars[tag].size(), rows.size()) << tag;
    for (const auto& point : scalars[tag]) {
      int64_t step = point[0].get<int64_t>();
      ASSERT_TRUE(rows.count(step)) << tag << " at step " << step;
      double expected = rows[step][key].get<double>();
      EXPECT_NEAR(point[1].get<double>(), expected, 1e-6 * std::max(1.0, std::abs(expected))) << tag << " step " << step;
    }
  }
  for (const char* tag : {"time_metrics/data_loading(%)", "memory/max_active(GiB)", "memory/rss(GiB)", "comm/exposed(%)",
                          "time_metrics/slowest_rank(s)", "memory/active(GiB)"}) {
    EXPECT_TRUE(scalars.contains(tag)) << tag;
  }
  // Validation at steps 3 and 6.
  ASSERT_TRUE(scalars.contains("validation_metrics/loss")) << scalars.dump();
  EXPECT_EQ(scalars["validation_metrics/loss"].size(), 2u);
}

}  // namespace
}  // namespace ctitan
