#include "ctitan/launcher/worker_group.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <system_error>

#include "ctitan/common/error.h"

namespace ctitan::launcher {
namespace {

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return int(std::max<int64_t>(0, ms));
}

Clock::time_point after(double seconds) { return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6)); }

// The stream mask a --tee / --redirects map gives `local_rank` (its own entry, else every rank's).
int streams_for(const std::map<int, int>& per_rank, int local_rank) {
  if (auto it = per_rank.find(local_rank); it != per_rank.end()) return it->second;
  if (auto it = per_rank.find(-1); it != per_rank.end()) return it->second;
  return 0;
}

}  // namespace

WorkerGroup::WorkerGroup(const LaunchOptions& options, int round, int store_port, SignalPipe& signals)
    : signals_(signals), stopped_(size_t(options.nproc_per_node), false) {
  std::string attempt_dir;
  if (!options.log_dir.empty()) {
    attempt_dir = fmt::format("{}/attempt_{}", options.log_dir, round);
    std::error_code ec;
    std::filesystem::create_directories(attempt_dir, ec);
    if (ec) throw IoError(fmt::format("run: cannot create log directory {}: {}", attempt_dir, ec.message()));
  }
  for (int local = 0; local < options.nproc_per_node; ++local) {
    auto spec = make_worker_spec(options, local, round, store_port);
    const int redirected = streams_for(options.redirects, local), teed = streams_for(options.tee, local);
    const bool shown = options.local_ranks_filter.empty() || options.local_ranks_filter.count(local) > 0;
    const bool torchrun_routing = !options.redirects.empty() || !options.tee.empty();
    const int to_file = attempt_dir.empty() ? 0 : torchrun_routing ? (redirected | teed) : 3;
    auto log = attempt_dir.empty() ? "" : fmt::format("{}/rank_{}.log", attempt_dir, spec.rank);
    // As torchrun: a teed stream reaches the console even when it is also redirected.
    const int to_console = shown ? (3 & ~redirected) | teed : 0;
    outputs_.push_back(std::make_unique<RankOutput>(spec.rank, to_console, to_file, log));
    workers_.push_back(std::make_unique<WorkerProcess>(spec));
  }
}

void WorkerGroup::pump(int timeout_ms) {
  std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
  std::vector<std::pair<size_t, int>> owners{{0, -1}};  // (worker, stream) of each fds[k]
  for (size_t i = 0; i < workers_.size(); ++i) {
    for (int stream : {0, 1}) {
      if (workers_[i]->fd(stream) < 0) continue;
      fds.push_back({workers_[i]->fd(stream), POLLIN, 0});
      owners.emplace_back(i, stream);
    }
  }
  if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
    throw std::system_error(errno, std::generic_category(), "run: poll");
  }
  signals_.poll_signal();
  for (size_t k = 1; k < fds.size(); ++k) {
    if (!fds[k].revents) continue;
    auto [i, stream] = owners[k];
    if (!outputs_[i]->read_from(fds[k].fd, stream)) workers_[i]->close_fd(stream);
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!workers_[i]->try_reap()) continue;
    // Whatever the worker wrote before exiting is in its pipes now: take it before judging.
    for (int stream : {0, 1}) {
      int fd = workers_[i]->fd(stream);
      if (fd >= 0 && !outputs_[i]->read_from(fd, stream)) workers_[i]->close_fd(stream);
    }
    if (!workers_[i]->status()->ok() && !stopped_[i] && first_failed_ < 0) first_failed_ = int(i);
  }
}

bool WorkerGroup::any_running() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->running(); });
}

void WorkerGroup::stop(int signo, double grace_s) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i]->running()) stopped_[i] = true;
    workers_[i]->signal_group(signo);
  }
  int signals_before = signals_.count();
  auto deadline = after(grace_s);
  while (any_running() && Clock::now() < deadline && signals_.count() == signals_before) {
    pump(std::min(ms_until(deadline), 100));
  }
  if (!any_running()) return;
  for (auto& w : workers_) w->signal_group(SIGKILL);
  // SIGKILL cannot be caught; only a process stuck in the kernel could outlast this.
  auto kill_deadline = after(5);
  while (any_running() && Clock::now() < kill_deadline) pump(std::min(ms_until(kill_deadline), 100));
}

void WorkerGroup::finish() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    // A worker's own children (a shell's background jobs) do not outlive the round.
    workers_[i]->signal_group(SIGKILL);
    for (int stream : {0, 1}) {
      if (workers_[i]->fd(stream) >= 0) outputs_[i]->read_from(workers_[i]->fd(stream), stream);
      workers_[i]->close_fd(stream);
    }
    outputs_[i]->flush();
  }
}

std::string WorkerGroup::describe(int local) const {
  const auto& w = *workers_[size_t(local)];
  return fmt::format("rank {} (pid {}) {}", w.rank(), w.pid(), w.status() ? w.status()->describe() : "is running");
}

std::string WorkerGroup::report(int failed_local) const {
  std::string out;
  if (failed_local >= 0) {
    const auto& tail = outputs_[size_t(failed_local)]->tail();
    int rank = workers_[size_t(failed_local)]->rank();
    if (tail.empty()) out += fmt::format("  rank {} printed nothing\n", rank);
    if (!tail.empty()) out += fmt::format("  last {} lines of rank {}:\n", tail.size(), rank);
    for (const auto& line : tail) out += fmt::format("    [rank{}]:{}\n", rank, line);
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (int(i) == failed_local) continue;
    const auto& status = workers_[i]->status();
    bool stopped = stopped_[i] && status && status->signal;
    out += fmt::format("  {}{}\n", describe(int(i)), stopped ? " (stopped by the launcher)" : "");
  }
  return out;
}

}  // namespace ctitan::launcher
