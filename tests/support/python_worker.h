#pragma once
// A Python process that runs one reference script's subcommands one after another, so that a test
// program imports torch and transformers once (6 CPU-seconds on the build machine) rather than
// once per call. The script implements `serve --fd N` (tests/cli/hf_transformers_reference.py):
// one JSON array of arguments per line on the socket at fd N, one line back per request,
// {"exit": status, "error": text}. The worker starts on the first call; a worker that died or
// timed out is replaced by a fresh one on the next.
#include <sys/types.h>

#include <string>
#include <vector>

#include "support/test_support.h"

namespace ctitan::testing {

class PythonWorker {
 public:
  explicit PythonWorker(std::string script) : script_(std::move(script)) {}
  ~PythonWorker();  // closes the socket, on which the worker ends, and reaps it
  PythonWorker(const PythonWorker&) = delete;
  PythonWorker& operator=(const PythonWorker&) = delete;

  // `script args...` as one request: its exit status, and the error line and whatever the worker
  // printed while it ran (library warnings, a traceback) as output. A request that does not end
  // within `timeout_s` kills the worker and fails.
  RunResult run(const std::vector<std::string>& args, int timeout_s = 300);

 private:
  void start();
  void stop();

  std::string script_;
  pid_t pid_ = -1;
  int socket_ = -1;
  std::string log_;  // the worker's stdout and stderr
};

}  // namespace ctitan::testing
