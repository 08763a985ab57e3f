// metrics.jsonl across a resume: rows up to the resumed step survive, later and torn rows go.
#include <gtest/gtest.h>

#include <fstream>

#include "ctitan/metrics/metrics_logger.h"
#include "support/test_support.h"

namespace ctitan::metrics {
namespace {

TEST(MetricsFile, ResumeKeepsRowsThroughTheResumedStepOnly) {
  ctitan::testing::TempDir dir;
  auto path = dir.file("metrics.jsonl");
  // Steps 1-3 with a validation row at 2, then a row torn by a crash in the middle of step 4's.
  ctitan::testing::write_file(path,
                              "{\"step\":1,\"loss\":3.0}\n{\"step\":2,\"loss\":2.5}\n"
                              "{\"step\":2,\"validation_loss\":2.7}\n{\"step\":3,\"loss\":2.2}\n{\"step\":4,\"lo");
  prepare_metrics_file(path, 2);
  auto rows = ctitan::testing::read_jsonl(path);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["step"], 1);
  EXPECT_EQ(rows[1]["loss"], 2.5);
  EXPECT_EQ(rows[2]["validation_loss"], 2.7);

  // The logger appends after the kept rows.
  {
    MetricsLogger logger(path, "");
    StepMetrics m;
    m.step = 3;
    m.loss = 2.1;
    logger.log(m);
  }
  rows = ctitan::testing::read_jsonl(path);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[3]["step"], 3);
  EXPECT_EQ(rows[3]["loss"], 2.1);
}

TEST(MetricsFile, FreshRunStartsEmpty) {
  ctitan::testing::TempDir dir;
  auto path = dir.file("metrics.jsonl");
  ctitan::testing::write_file(path, "{\"step\":1,\"loss\":3.0}\n");
  prepare_metrics_file(path, 0);
  EXPECT_FALSE(std::ifstream(path).good());
}

}  // namespace
}  // namespace ctitan::metrics
