#include "ctitan/metrics/profiler.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "ctitan/common/error.h"

namespace ctitan::metrics {

StepTrace::StepTrace(const std::string& dir, int rank) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("profiling: cannot create '{}': {}", dir, ec.message()));
  trace_path_ = (std::filesystem::path(dir) / fmt::format("rank{}_trace.json", rank)).string();
  summary_path_ = (std::filesystem::path(dir) / fmt::format("rank{}_summary.txt", rank)).string();
  recorder_ = std::make_unique<torch::autograd::profiler::RecordProfile>(trace_path_);
}

StepTrace::~StepTrace() {
  recorder_.reset();  // stops the profiler and writes the trace
  try {
    std::ofstream(summary_path_) << summarize_trace(trace_path_);
  } catch (const std::exception&) {
    // A summary is a convenience; the trace itself is already on disk.
  }
}

std::unique_ptr<StepTrace> maybe_trace_step(const config::Profiling& profiling, const std::string& dump_folder,
                                            int rank, int64_t step) {
  if (!profiling.enable_profiling || step % profiling.profile_freq != 0) return nullptr;
  auto dir = std::filesystem::path(dump_folder) / profiling.save_traces_folder / fmt::format("iteration_{}", step);
  return std::make_unique<StepTrace>(dir.string(), rank);
}

namespace {

// "...torch::autograd::CppNode<ctitan::ops::(anonymous namespace)::CausalAttention>" (a custom
// Function's backward) -> "...CausalAttention (backward)".
std::string short_name(const std::string& name) {
  const std::string node = "torch::autograd::CppNode<";
  auto at = name.find(node);
  if (at == std::string::npos || name.back() != '>') return name;
  auto inner = name.substr(at + node.size(), name.size() - at - node.size() - 1);
  return name.substr(0, at) + inner.substr(inner.rfind("::") + 2) + " (backward)";
}

struct Span {
  double start, end;
  std::string name;
};

}  // namespace

std::string summarize_trace(const std::string& trace_path) {
  std::ifstream in(trace_path);
  auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!json.is_array()) throw InputError(fmt::format("profiling: '{}' is not a Chrome trace array", trace_path));
  // Complete events ("ph": "X") per thread; nested ops lie inside their parent's interval.
  std::map<int64_t, std::vector<Span>> by_thread;
  for (const auto& e : json) {
    if (e.value("ph", "") != "X") continue;
    double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
    by_thread[e.value("tid", int64_t(0))].push_back({ts, ts + dur, short_name(e.value("name", "?"))});
  }
  std::map<std::string, std::pair<int64_t, double>> self;  // name -> (calls, self us)
  double total = 0;
  for (auto& [tid, spans] : by_thread) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;  // parents before children
    });
    std::vector<size_t> stack;
    std::vector<double> child_time(spans.size(), 0.0);
    auto close = [&](size_t i) {
      double d = spans[i].end - spans[i].start;
      auto& entry = self[spans[i].name];
      entry.first += 1;
      entry.second += d - child_time[i];
    };
    for (size_t i = 0; i < spans.size(); ++i) {
      while (!stack.empty() && spans[stack.back()].end <= spans[i].start) {
        close(stack.back());
        stack.pop_back();
      }
      if (stack.empty()) total += spans[i].end - spans[i].start;
      else child_time[stack.back()] += spans[i].end - spans[i].start;
      stack.push_back(i);
    }
    for (; !stack.empty(); stack.pop_back()) close(stack.back());
  }
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(self.begin(), self.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::string out = fmt::format("{:<48} {:>8} {:>11} {:>7}\n", "op (self time)", "calls", "self ms", "share");
  for (const auto& [name, stat] : rows) {
    out += fmt::format("{:<48} {:>8} {:>11.2f} {:>6.1f}%\n", name.substr(0, 48), stat.first, stat.second / 1e3,
                       total > 0 ? 100.0 * stat.second / total : 0.0);
  }
  out += fmt::format("{:<48} {:>8} {:>11.2f}\n", "total time in top-level ops", "", total / 1e3);
  return out;
}

}  // namespace ctitan::metrics
