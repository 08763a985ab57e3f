#include "ctitan/launcher/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace ctitan::launcher {
namespace {

// Handlers may only do async-signal-safe work: one write(2) of the signal number.
int g_pipe[2] = {-1, -1};
struct sigaction g_saved[NSIG];
constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};

void on_signal(int signo) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(signo);
  ssize_t ignored = write(g_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw std::system_error(errno, std::generic_category(), "run: pipe");
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&sa.sa_mask);
  for (int sig : kHandled) sigaction(sig, &sa, &g_saved[sig]);
  signal(SIGPIPE, SIG_IGN);
}

SignalPipe::~SignalPipe() {
  for (int sig : kHandled) sigaction(sig, &g_saved[sig], nullptr);
  close(g_pipe[0]);
  close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

int SignalPipe::fd() const { return g_pipe[0]; }

int SignalPipe::poll_signal() {
  unsigned char buf[64];
  ssize_t n;
  while ((n = read(g_pipe[0], buf, sizeof(buf))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == SIGCHLD) continue;
      ++count_;
      if (!first_) first_ = buf[i];
    }
  }
  return first_;
}

}  // namespace ctitan::launcher
