#include "ctitan/launcher/worker_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <system_error>
#include <thread>

#include "ctitan/common/error.h"

extern char** environ;

namespace ctitan::launcher {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

bool is_executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// The program's path as execve needs it: names without a slash are looked up in PATH here,
// before fork, because the child may only call async-signal-safe functions.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (!is_executable(name)) throw InputError(fmt::format("run: '{}' is not an executable file", name), 2);
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = std::min(dirs.find(':', start), dirs.size());
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable(candidate)) return candidate;
    start = end + 1;
  }
  throw InputError(fmt::format("run: program '{}' not found in PATH", name), 2);
}

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buf, size_t(n));
}

}  // namespace

WorkerSpec make_worker_spec(const LaunchOptions& options, int local_rank, int round, int store_port) {
  WorkerSpec spec;
  spec.local_rank = local_rank;
  spec.rank = options.node_rank * options.nproc_per_node + local_rank;
  if (options.exec) {
    spec.program = resolve_program(options.command.at(0));
    spec.argv = options.command;
  } else {
    spec.program = self_executable();
    spec.argv = {spec.program};
    spec.argv.insert(spec.argv.end(), options.command.begin(), options.command.end());
  }

  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  env["RANK"] = std::to_string(spec.rank);
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = std::to_string(options.nnodes * options.nproc_per_node);
  env["LOCAL_WORLD_SIZE"] = std::to_string(options.nproc_per_node);
  env["GROUP_RANK"] = std::to_string(options.node_rank);
  env["ROLE_RANK"] = std::to_string(spec.rank);
  env["MASTER_ADDR"] = options.master_addr;
  env["MASTER_PORT"] = std::to_string(store_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(round);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(options.max_restarts);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_RUN_ID"] = options.rdzv_id;
  env["ROLE_NAME"] = options.role;
  env["ROLE_WORLD_SIZE"] = std::to_string(options.nnodes * options.nproc_per_node);
  // Intra-op threads default to the cores shared by the local ranks: without this, every rank
  // would start one thread per core and they would all fight over the same cores.
  if (env.count("OMP_NUM_THREADS") == 0) {
    int cores = int(std::thread::hardware_concurrency());
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, cores / options.nproc_per_node));
  }
  for (const auto& [key, value] : env) spec.env.push_back(key + "=" + value);
  return spec;
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? std::string("SIG") + abbrev : fmt::format("signal {}", signo);
}

std::string ExitStatus::describe() const {
  return signal ? "was killed by " + signal_name(signal) : fmt::format("exited with code {}", code);
}

WorkerProcess::WorkerProcess(const WorkerSpec& spec) : rank_(spec.rank), local_rank_(spec.local_rank) {
  // Everything the child needs is built before fork: after fork, in a process whose store
  // threads may hold locks, the child may only call async-signal-safe functions.
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::string exec_failed = fmt::format("ctitan run: could not execute {}\n", spec.program);

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw_errno("run: pipe");
  if (pipe2(err, O_CLOEXEC) != 0) {
    int saved = errno;
    close(out[0]);
    close(out[1]);
    errno = saved;
    throw_errno("run: pipe");
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t parent = getpid();

  // Signals stay blocked from fork until the child has reset its handlers: a SIGTERM arriving in
  // between would otherwise run the launcher's handler in the child, and that handler writes to
  // the launcher's signal pipe, which the child shares.
  sigset_t all, saved_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved_mask);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The launcher may have died between fork and prctl; then nobody would send the signal.
    if (getppid() != parent) _exit(1);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    // Dispositions the launcher changed, and its signal mask, must not leak into the worker.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE}) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Store sockets and other workers' pipes: a worker holding them would keep them alive.
    close_range(3, ~0U, 0);
    execve(spec.program.c_str(), argv.data(), envp.data());
    ssize_t ignored = write(2, exec_failed.data(), exec_failed.size());
    (void)ignored;
    _exit(127);
  }
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  close(out[1]);
  close(err[1]);
  if (devnull >= 0) close(devnull);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    errno = fork_errno;
    throw_errno("run: fork");
  }
  // Also set the group from this side, so that signal_group() works even before the child ran.
  setpgid(pid, pid);
  pid_ = pid;
  fds_[0] = out[0];
  fds_[1] = err[0];
  for (int fd : fds_) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

WorkerProcess::~WorkerProcess() {
  // Normally the supervisor has already stopped and reaped the worker; this is the path taken
  // when an exception unwinds the launcher, and it must not leave a process behind.
  if (running()) {
    signal_group(SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  for (int i = 0; i < 2; ++i) close_fd(i);
}

void WorkerProcess::close_fd(int stream) {
  if (fds_[stream] >= 0) close(fds_[stream]);
  fds_[stream] = -1;
}

bool WorkerProcess::try_reap() {
  if (!running()) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return false;
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  } else {
    s.code = WEXITSTATUS(status);
  }
  status_ = s;
  return true;
}

void WorkerProcess::signal_group(int signo) const {
  if (pid_ > 0) kill(-pid_, signo);
}

}  // namespace ctitan::launcher
