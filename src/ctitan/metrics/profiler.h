#pragma once
// Op-level profiling of chosen training steps, torchtitan's `[profiling]` section.
// It uses the legacy autograd profiler, which every libtorch build has (the 2.x wheels link
// kineto but export no CMake target for it), and which records every ATen op (forward and backward, with input shapes) and writes a Chrome trace that
// Perfetto and chrome://tracing open. Next to each trace goes a plain-text table of self time
// per op, the figure the performance notes are written from.
#include <memory>
#include <string>

#include "ctitan/config/job_config.h"

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace ctitan::metrics {

// Records one step while alive; the destructor writes
// {dump_folder}/{save_traces_folder}/iteration_{step}/rank{rank}_trace.json and
// rank{rank}_summary.txt.
class StepTrace {
 public:
  StepTrace(const std::string& dir, int rank);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

 private:
  std::string trace_path_, summary_path_;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recorder_;
};

// A StepTrace when profiling is enabled and `step` (1-based) is a multiple of profile_freq;
// otherwise null, which costs nothing.
std::unique_ptr<StepTrace> maybe_trace_step(const config::Profiling& profiling, const std::string& dump_folder,
                                            int rank, int64_t step);

// Self time (time not spent in nested ops) per op name from a Chrome trace written by StepTrace,
// as a table sorted by total self time: op, calls, self ms, share of the step.
std::string summarize_trace(const std::string& trace_path);

}  // namespace ctitan::metrics
