// The monitoring table: target ranges judged at their edges, and a 2-rank run whose metrics.jsonl
// rows carry every share, consistent with the step's own time split; the summary file follows.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <nlohmann/json.hpp>

#include "ctitan/metrics/monitoring.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using metrics::Monitoring;

TEST(Monitoring, TargetRangesAreJudgedAtTheirEdges) {
  auto checks = metrics::check_targets(Monitoring{70.0, 85.5, 10.0, 80.0, 4.99});
  ASSERT_EQ(checks.size(), 5u);
  EXPECT_EQ(checks[0].name, "memory use");
  EXPECT_EQ(checks[0].met, true);   // 70% is inside 70-90%
  EXPECT_EQ(checks[1].met, true);   // compute 85.5% > 85%
  EXPECT_EQ(checks[2].met, true);   // bandwidth 80% is inside 60-80%
  EXPECT_EQ(checks[3].met, true);   // grad sync 4.99% < 5%
  EXPECT_FALSE(checks[4].met.has_value());  // exposed communication has no target

  checks = metrics::check_targets(Monitoring{95.0, 60.0, 10.0, NAN, 7.0});
  EXPECT_EQ(checks[0].met, false);
  EXPECT_EQ(checks[1].met, false);
  EXPECT_FALSE(checks[2].met.has_value()) << "bandwidth of one process is not measured";
  EXPECT_EQ(checks[3].met, false);
  auto table = metrics::monitoring_table(checks);
  EXPECT_NE(table.find("not measured"), std::string::npos) << table;
  EXPECT_NE(table.find("95.0%"), std::string::npos) << table;
}

// DDP over 2 ranks. Every log row has this rank's shares and the worst rank's; compute + exposed
// communication + data wait make up the step (100%, up to rounding), the worst rank's compute is
// never above this rank's, and the run ends with monitoring_summary.json naming each target. No figure is
// compared with a machine-dependent bound.
TEST(CliMonitoring, TwoRankRunLogsEveryShareAndEndsWithTheSummary) {
  testing::TempDir tmp;
  auto dump = tmp.file("run");
  auto r = testing::run_ctitan(
      testing::concat(testing::concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                      testing::tiny_job_args(dump)),
                      {"--training.steps", "6", "--metrics.log_freq", "2", "--parallelism.data_parallel_shard_degree",
                       "1", "--parallelism.data_parallel_replicate_degree", "2",
                       "--comm.link_gbytes_per_s", "0"}),  // 0: measured at start-up, which this test reads
      240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("link bandwidth for metrics"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gradient sync latency"), std::string::npos) << r.output;
  // Each rank prints its own shares at every log step, with the worst rank's.
  for (int rank : {0, 1}) {
    int monitor_lines = 0;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("[rank" + std::to_string(rank) + "]:", 0) == 0 && line.find("monitor: memory ") != std::string::npos) {
        ++monitor_lines;
      }
    }
    EXPECT_EQ(monitor_lines, 3) << "rank " << rank << "\n" << r.output;  // log steps 2, 4, 6
  }
  EXPECT_NE(r.output.find("(worst rank: memory "), std::string::npos) << r.output;

  int rows = 0;
  for (const auto& row : testing::read_jsonl((fs::path(dump) / "metrics.jsonl").string())) {
    if (!row.contains("loss")) continue;
    ++rows;
    double compute = row["compute_pct"], exposed = row["comm_exposed_pct"];
    double data = 100.0 * row["time_data_s"].get<double>() / row["time_step_s"].get<double>();
    EXPECT_NEAR(compute + exposed + data, 100.0, 1e-6) << row.dump();
    EXPECT_LE(row["worst_compute_pct"].get<double>(), compute + 1e-9) << row.dump();
    EXPECT_GE(row["worst_grad_sync_pct"].get<double>(), row["grad_sync_pct"].get<double>() - 1e-9) << row.dump();
    EXPECT_GT(row["comm_bandwidth_gbps"].get<double>(), 0) << row.dump();
    EXPECT_GT(row["comm_bandwidth_use_pct"].get<double>(), 0) << row.dump();
    EXPECT_GT(row["memory_capacity_pct"].get<double>(), 0) << row.dump();
    EXPECT_GE(row["grad_sync_pct"].get<double>(), 0) << row.dump();
    // The global loss is the token-weighted mean of the ranks' own losses, so their maximum
    // (global_max_loss) is at least it; with equal token counts, at most twice it on 2 ranks.
    double loss = row["loss"], max_loss = row["max_loss"];
    EXPECT_GE(max_loss, loss * (1 - 1e-6)) << row.dump();
    EXPECT_LE(max_loss, 2 * loss * (1 + 1e-6)) << row.dump();
  }
  auto s = nlohmann::json::parse(testing::read_file((fs::path(dump) / "monitoring_summary.json").string()));
  EXPECT_EQ(s["first_step"], 1);
  EXPECT_EQ(s["last_step"], 6);
  for (const char* name : {"memory use", "compute share", "bandwidth use", "gradient sync latency"}) {
    ASSERT_TRUE(s.contains(name)) << s.dump();
    EXPECT_TRUE(s[name]["value_pct"].is_number()) << name << ": measured on 2 ranks";
    EXPECT_TRUE(s[name]["met"].is_boolean()) << name;
  }
  EXPECT_EQ(rows, 3);
}

}  // namespace
}  // namespace ctitan
