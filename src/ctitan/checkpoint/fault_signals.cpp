#include "ctitan/checkpoint/fault_signals.h"

#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <string>

namespace ctitan::checkpoint {
namespace {

volatile std::sig_atomic_t g_sigterm = 0;
struct sigaction g_previous {};
bool g_installed = false;

void on_sigterm(int) { g_sigterm = 1; }

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

}  // namespace

void install_sigterm_handler() {
  if (g_installed) return;
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &g_previous);
  g_installed = true;
}

void uninstall_sigterm_handler() {
  if (!g_installed) return;
  sigaction(SIGTERM, &g_previous, nullptr);
  g_installed = false;
}

bool sigterm_received() { return g_sigterm != 0; }
void clear_sigterm() { g_sigterm = 0; }

void inject_fault_in_save(int64_t step, int rank) {
  if (env_int("TORCHELASTIC_RESTART_COUNT", 0) != 0 || env_int("CTITAN_FAULT_RANK", 0) != rank) return;
  if (env_int("CTITAN_FAULT_STALL_IN_SAVE_AT_STEP", -1) == step) {
    spdlog::warn("fault injection: rank {} stops itself (SIGSTOP) in the checkpoint save of step {}", rank, step);
    std::raise(SIGSTOP);
  }
}

void inject_fault_in_setup(int rank) {
  if (env_int("TORCHELASTIC_RESTART_COUNT", 0) != 0 || env_int("CTITAN_FAULT_RANK", 0) != rank) return;
  if (env_int("CTITAN_FAULT_SIGTERM_IN_SETUP", 0) == 1) {
    spdlog::warn("fault injection: rank {} raises SIGTERM during set-up", rank);
    std::raise(SIGTERM);
  }
}

void inject_faults_after_step(int64_t step, int rank) {
  if (env_int("TORCHELASTIC_RESTART_COUNT", 0) != 0 || env_int("CTITAN_FAULT_RANK", 0) != rank) return;
  if (env_int("CTITAN_FAULT_KILL_AT_STEP", -1) == step) {
    spdlog::warn("fault injection: rank {} raises SIGKILL after step {}", rank, step);
    std::raise(SIGKILL);
  }
  if (env_int("CTITAN_FAULT_STALL_AT_STEP", -1) == step) {
    spdlog::warn("fault injection: rank {} stops itself (SIGSTOP) after step {}", rank, step);
    std::raise(SIGSTOP);
  }
  if (env_int("CTITAN_FAULT_SIGTERM_AT_STEP", -1) == step) {
    spdlog::warn("fault injection: rank {} raises SIGTERM after step {}", rank, step);
    std::raise(SIGTERM);
  }
}

}  // namespace ctitan::checkpoint
