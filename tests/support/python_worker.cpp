#include "support/python_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace ctitan::testing {
namespace {

constexpr int kWorkerFd = 3;  // the socket's number in the worker

std::string tail_from(const std::string& path, size_t offset) {
  auto text = read_file(path);
  return offset < text.size() ? text.substr(offset) : "";
}

}  // namespace

PythonWorker::~PythonWorker() { stop(); }

void PythonWorker::start() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;
  char log_template[] = "/tmp/ctitan_python_worker_XXXXXX";
  int log_fd = mkostemp(log_template, O_CLOEXEC);
  if (log_fd < 0) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  log_ = log_template;
  const std::string python = python_path(), fd_arg = std::to_string(kWorkerFd);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    if (fds[1] == kWorkerFd) {
      fcntl(kWorkerFd, F_SETFD, 0);  // already in place: only close-on-exec to clear
    } else {
      dup2(fds[1], kWorkerFd);  // dup2 clears close-on-exec on the copy
    }
    const char* argv[] = {python.c_str(), script_.c_str(), "serve", "--fd", fd_arg.c_str(), nullptr};
    execv(python.c_str(), const_cast<char* const*>(argv));
    _exit(127);
  }
  close(log_fd);
  close(fds[1]);
  socket_ = fds[0];
  if (pid_ < 0) stop();  // fork failed: closes the socket and removes the log
}

void PythonWorker::stop() {
  if (socket_ >= 0) close(socket_);
  socket_ = -1;
  if (pid_ > 0) {
    // Closing the socket ends the worker's request loop; a worker stuck in a request is killed.
    int status = 0;
    for (int i = 0; i < 250 && waitpid(pid_, &status, WNOHANG) == 0; ++i) usleep(20000);
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  pid_ = -1;
  if (!log_.empty()) unlink(log_.c_str());
  log_.clear();
}

RunResult PythonWorker::run(const std::vector<std::string>& args, int timeout_s) {
  if (pid_ <= 0) start();
  RunResult result;
  if (pid_ <= 0) {
    result.output = "[test harness: could not start the Python worker]";
    return result;
  }
  const auto log_offset = size_t(std::filesystem::file_size(log_));
  const std::string request = nlohmann::json(args).dump() + "\n";
  if (send(socket_, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
    result.output = tail_from(log_, log_offset) + "\n[test harness: the Python worker is gone]";
    stop();
    return result;
  }
  std::string reply;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (reply.empty() || reply.back() != '\n') {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{socket_, POLLIN, 0};
    char buffer[4096];
    ssize_t n = left.count() > 0 && poll(&p, 1, int(left.count())) > 0 ? recv(socket_, buffer, sizeof(buffer), 0) : -2;
    if (n <= 0) {
      result.output = tail_from(log_, log_offset) +
                      (n == -2 ? "\n[test harness: killed after timeout]" : "\n[test harness: the Python worker died]");
      stop();
      return result;
    }
    reply.append(buffer, size_t(n));
  }
  auto answer = nlohmann::json::parse(reply, nullptr, /*allow_exceptions=*/false);
  result.exit_code = answer.is_object() ? answer.value("exit", 1) : 1;
  result.output = tail_from(log_, log_offset);
  if (answer.is_object() && !answer.value("error", std::string()).empty()) {
    result.output += answer["error"].get<std::string>() + "\n";
  }
  return result;
}

}  // namespace ctitan::testing
