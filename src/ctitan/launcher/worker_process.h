#pragma once
// One worker process of `ctitan run`: what it runs and with which environment (WorkerSpec),
// starting it in its own process group with its output on pipes (WorkerProcess), and how it
// ended (ExitStatus).
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "ctitan/launcher/launcher.h"

namespace ctitan::launcher {

struct WorkerSpec {
  int rank = 0;                    // global rank: node_rank * nproc_per_node + local_rank
  int local_rank = 0;
  std::string program;             // absolute or relative path, already resolved (no PATH search)
  std::vector<std::string> argv;   // argv[0] included
  std::vector<std::string> env;    // complete environment, "KEY=VALUE"
};

// The spec of local rank `local_rank` in restart round `round`: the launcher's environment plus
// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, MASTER_ADDR,
// MASTER_PORT (= `store_port`, the port the store really listens on), TORCHELASTIC_* and
// OMP_NUM_THREADS (cores / nproc_per_node unless already set). Throws InputError when the
// program cannot be found.
WorkerSpec make_worker_spec(const LaunchOptions& options, int local_rank, int round, int store_port);

// "SIGKILL" for SIGKILL; "signal 64" when the number has no name.
std::string signal_name(int signo);

struct ExitStatus {
  int code = 0;    // exit code when signal == 0
  int signal = 0;  // terminating signal, 0 when the process exited
  bool ok() const { return signal == 0 && code == 0; }
  std::string describe() const;  // "exited with code 1" or "was killed by SIGKILL"
};

// A started worker. Not copyable: it owns the read ends of the worker's stdout and stderr pipes.
class WorkerProcess {
 public:
  // fork + exec. The child leads its own process group (so that stopping it reaches anything it
  // started), gets SIGKILL when the launcher dies (PR_SET_PDEATHSIG), reads /dev/null as stdin and
  // inherits no other descriptor. Throws std::system_error when pipes or fork fail.
  explicit WorkerProcess(const WorkerSpec& spec);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  int rank() const { return rank_; }
  int local_rank() const { return local_rank_; }
  pid_t pid() const { return pid_; }
  // Read end of the worker's stdout (stream 0) or stderr (stream 1), non-blocking; -1 once closed.
  int fd(int stream) const { return fds_[stream]; }
  void close_fd(int stream);

  // waitpid(WNOHANG). True exactly once: when this call found the worker ended.
  bool try_reap();
  bool running() const { return !status_.has_value(); }
  const std::optional<ExitStatus>& status() const { return status_; }

  // Sends `signo` to the worker's process group (its children included). Harmless after exit.
  void signal_group(int signo) const;

 private:
  int rank_ = 0;
  int local_rank_ = 0;
  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  std::optional<ExitStatus> status_;
};

}  // namespace ctitan::launcher
