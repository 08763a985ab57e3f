// `ctitan report` of two runs, checked by an independent parser (tests/metrics/check_report.py,
// Python's xml.etree): well-formed SVG, one chart per metric, one line per run with as many points
// as that run logged.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

TEST(CliReport, TwoRunsSideBySideAsWellFormedSvg) {
  if (!testing::have_python()) GTEST_SKIP() << "no venv Python for the independent parser";
  testing::TempDir tmp;
  // Two layouts of the same job: one process, and 2-rank FSDP with validation.
  auto a = testing::run_ctitan(testing::concat(testing::concat({"train"}, testing::tiny_job_args(tmp.file("one_process"))),
                                               {"--training.steps", "6", "--metrics.log_freq", "1"}),
                               120);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = testing::run_ctitan(
      testing::concat(testing::concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                      testing::tiny_job_args(tmp.file("fsdp2"))),
                      {"--training.steps", "6", "--metrics.log_freq", "2", "--validation.enable", "--validation.freq",
                       "3", "--validation.steps", "1"}),
      240);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto report = tmp.file("report.html");
  auto r = testing::run_ctitan({"report", tmp.file("one_process"), tmp.file("fsdp2"), "--output", report}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto check = testing::run_python({std::string(CTITAN_SOURCE_DIR) + "/tests/metrics/check_report.py", report});
  ASSERT_EQ(check.exit_code, 0) << check.output;
  auto result = nlohmann::json::parse(check.output);
  auto charts = result["charts"].get<std::vector<std::string>>();
  for (const char* metric : {"loss", "validation_loss", "grad_norm", "lr", "tps", "mfu", "memory_peak_gib"}) {
    EXPECT_NE(std::find(charts.begin(), charts.end(), metric), charts.end()) << metric << " in " << check.output;
  }
  const auto& lines = result["lines"];
  EXPECT_EQ(lines["one_process/loss"], 6) << check.output;  // logged every step
  EXPECT_EQ(lines["fsdp2/loss"], 3) << check.output;        // steps 2, 4, 6
  EXPECT_EQ(lines["fsdp2/validation_loss"], 2) << check.output;  // steps 3, 6
  EXPECT_FALSE(lines.contains("one_process/validation_loss")) << "no validation in that run";

  auto missing = testing::run_ctitan({"report", tmp.file("nothing_here")}, 30);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("report: cannot read"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace ctitan
