#pragma once
// Background processes for launcher tests: start a program with its output in a file, wait for
// it (bounded), find a free port, tell a finished process from a running one. Header-only so
// that the tests which need it do not rebuild every test that includes test_support.h.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ctitan::testing {

// A port that was free a moment ago: the kernel picks it for a socket we close at once.
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// `program args...` in the background (no PATH search), stdout and stderr to `out_path`, with
// `env` ("KEY=VALUE") added to this process's environment. The caller waits for it.
inline pid_t spawn_program(const std::string& program, const std::vector<std::string>& args,
                           const std::string& out_path, const std::vector<std::string>& env = {}) {
  std::vector<char*> argv{const_cast<char*>(program.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    FILE* out = fopen(out_path.c_str(), "w");
    dup2(fileno(out), 1);
    dup2(fileno(out), 2);
    for (const auto& kv : env) putenv(const_cast<char*>(kv.c_str()));
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

inline pid_t spawn_ctitan(const std::vector<std::string>& args, const std::string& out_path,
                          const std::vector<std::string>& env = {}) {
  return spawn_program(CTITAN_BIN, args, out_path, env);
}

// Exit code (128+signal when killed), or -1 if `pid` is still running after `timeout_s`.
inline int wait_exit(pid_t pid, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// wait_exit, and a SIGKILL (reaped) when the process overstays: a hang fails the test, it never
// leaves a process behind.
inline int wait_exit_or_kill(pid_t pid, double timeout_s) {
  int code = wait_exit(pid, timeout_s);
  if (code < 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return code;
}

inline bool wait_until(const std::function<bool()>& done, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Gone, or a zombie: once its parent is gone, init may be slow (or, in a container, fail) to
// reap it, but a zombie runs nothing and holds nothing.
inline bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  auto close_paren = line.rfind(')');
  return close_paren == std::string::npos || line.substr(close_paren + 2, 1) == "Z";
}

}  // namespace ctitan::testing
