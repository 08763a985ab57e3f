#pragma once
// This node's workers in one round, with their output: started together, watched together (one
// poll(2) over every worker pipe and the launcher's signal pipe), stopped together.
#include <memory>
#include <string>
#include <vector>

#include "ctitan/launcher/launcher.h"
#include "ctitan/launcher/output_prefix.h"
#include "ctitan/launcher/signals.h"
#include "ctitan/launcher/worker_process.h"

namespace ctitan::launcher {

class WorkerGroup {
 public:
  // Starts the nproc_per_node workers of `round`, their output going to the console (filtered by
  // --local-ranks-filter) and to --log-dir. Throws InputError when a log file cannot be created.
  WorkerGroup(const LaunchOptions& options, int round, int store_port, SignalPipe& signals);

  // Waits up to `timeout_ms` for output, a worker exit or a signal; prints the output, reaps the
  // workers that ended and consumes the signal pipe (see SignalPipe::poll_signal).
  void pump(int timeout_ms);
  bool any_running() const;
  // Local index of the first worker that failed by itself (not stopped by the launcher), or -1.
  int first_failure() const { return first_failed_; }

  // Sends `signo` to every worker's process group, waits up to `grace_s` (cut short by any
  // further signal to the launcher: Ctrl-C twice), then SIGKILLs the rest. Bounded.
  void stop(int signo, double grace_s);
  // Kills what the workers left behind in their process groups and prints their last output.
  void finish();

  // "rank 3 (pid 123) exited with code 1"
  std::string describe(int local) const;
  // Summary lines: the last output of `failed_local` (if >= 0), then every other worker's state.
  std::string report(int failed_local) const;

 private:
  SignalPipe& signals_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;  // by local rank
  std::vector<std::unique_ptr<RankOutput>> outputs_;     // by local rank
  std::vector<bool> stopped_;                            // signalled by the launcher while running
  int first_failed_ = -1;
};

}  // namespace ctitan::launcher
