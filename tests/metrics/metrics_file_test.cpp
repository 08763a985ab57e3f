// metrics.jsonl across a resume: rows up to the resumed step survive, later and torn rows go.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

#include "ctitan/metrics/metrics_logger.h"
#include "ctitan/common/error.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

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

// /dev/full opens, takes buffered writes and fails them with ENOSPC when they reach the kernel,
// as a full disk does: the flush is an IoError naming the file, never a silent empty file.
TEST(MetricsFile, AFailedWriteIsAnIoErrorNamingTheFile) {
  MetricsLogger logger("/dev/full", "");
  StepMetrics m;
  m.step = 1;
  try {
    logger.log(m);
    logger.flush();
    FAIL() << "no error writing to /dev/full";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("writing metrics file /dev/full failed: No space left on device"),
              std::string::npos) << e.what();
  }
}

// The whole run on a full disk with checkpointing off (issue #17: it exited 0 with an empty
// metrics.jsonl): the dump folder is a 64 KB tmpfs, filled, in a private mount namespace.
TEST(CliMetricsFile, FullDiskFailsTheRunNamingTheMetricsFile) {
  if (std::system("unshare -m true 2>/dev/null") != 0) GTEST_SKIP() << "no mount namespaces here";
  ctitan::testing::TempDir dir;
  auto args = ctitan::testing::tiny_job_args(dir.path());  // the data stays in dir
  std::string full = dir.file("full");
  std::string command = "mkdir -p " + full + " && mount -t tmpfs -o size=64k tmpfs " + full + " && (dd if=/dev/zero of=" +
                        full + "/filler bs=4k 2>/dev/null; true) && " + CTITAN_BIN + " train";
  for (const auto& a : args) command += " '" + a + "'";
  command += " --job.dump_folder " + full + " --training.steps 4 --metrics.log_freq 1";
  int status = std::system(("unshare -m sh -c \"" + command + "\" > " + dir.file("out.txt") + " 2>&1").c_str());
  auto output = ctitan::testing::read_file(dir.file("out.txt"));
  EXPECT_EQ(WEXITSTATUS(status), 1) << output;
  EXPECT_NE(output.find("ctitan: writing metrics file " + full + "/metrics.jsonl failed: No space left on device"),
            std::string::npos) << output;
}

}  // namespace
}  // namespace ctitan::metrics
