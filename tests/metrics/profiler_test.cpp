#include "ctitan/metrics/profiler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ctitan::metrics {
namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / (name + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// Only steps that are multiples of profile_freq are traced, at torchtitan's path, and the trace
// holds the ops that ran (the summary is computed from it).
TEST(Profiler, TracesEveryNthStepAtTorchtitansPath) {
  auto dump = fresh_dir("ctitan_profiler_");
  config::Profiling p;
  p.enable_profiling = true;
  p.profile_freq = 3;
  p.save_traces_folder = "traces";
  EXPECT_EQ(maybe_trace_step(p, dump.string(), 1, 2), nullptr);
  {
    auto trace = maybe_trace_step(p, dump.string(), 1, 3);
    ASSERT_NE(trace, nullptr);
    torch::mm(torch::randn({8, 8}), torch::randn({8, 8}));
  }
  auto dir = dump / "traces" / "iteration_3";
  ASSERT_TRUE(std::filesystem::exists(dir / "rank1_trace.json"));
  std::ifstream summary(dir / "rank1_summary.txt");
  std::string text((std::istreambuf_iterator<char>(summary)), {});
  EXPECT_NE(text.find("aten::mm"), std::string::npos) << text;
  p.enable_profiling = false;
  EXPECT_EQ(maybe_trace_step(p, dump.string(), 0, 3), nullptr);
  std::filesystem::remove_all(dump);
}

// Self time subtracts nested ops: parent 0..100 us with a child 10..40 us gives parent 70, child 30.
TEST(Profiler, SummarySubtractsNestedOps) {
  auto dir = fresh_dir("ctitan_summary_");
  std::filesystem::create_directories(dir);
  auto path = (dir / "t.json").string();
  std::ofstream(path) << R"([{"name":"parent","ph":"X","ts":0,"dur":100,"tid":1},
                             {"name":"child","ph":"X","ts":10,"dur":30,"tid":1}])";
  auto text = summarize_trace(path);
  // The row of `op`: name, calls, self ms, share.
  auto row = [&](const std::string& op) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string name, calls, ms;
      words >> name >> calls >> ms;
      if (name == op) return calls + " " + ms;
    }
    return std::string("missing");
  };
  EXPECT_EQ(row("parent"), "1 0.07") << text;
  EXPECT_EQ(row("child"), "1 0.03") << text;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ctitan::metrics
