// The supervisor of `ctitan run`: one loop per restart round.
//   join the round on the store -> start the workers -> monitor -> stop -> restart or exit
// Monitoring waits in poll(2) on the workers' pipes and a self-pipe fed by the signal handlers
// (SIGCHLD included), so output, worker exits and Ctrl-C are handled the moment they happen;
// the store is polled every --monitor-interval for what the other nodes report.
#include "ctitan/distributed/launcher.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <memory>

#include "ctitan/common/error.h"
#include "ctitan/distributed/launcher_output.h"
#include "ctitan/distributed/launcher_rendezvous.h"
#include "ctitan/distributed/launcher_signals.h"
#include "ctitan/distributed/launcher_workers.h"

namespace ctitan::distributed {
namespace {

using Clock = std::chrono::steady_clock;

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

int ms_until(Clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return int(std::max<int64_t>(0, ms));
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

// --- one round's outcome --------------------------------------------------------------------
struct Outcome {
  enum Kind { kSucceeded, kFailed, kInterrupted } kind = kSucceeded;
  RoundFailure failure;        // kFailed
  int failed_local = -1;       // kFailed on this node: index of the worker at fault
};

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& options) : o_(options) {}
  int run();

 private:
  bool interrupted();
  void start_workers(int round);
  Outcome monitor(int round);
  void pump(int timeout_ms);
  void stop_workers(int signo);
  void finish_round();
  void print_summary(const Outcome& outcome, int round) const;
  int run_rounds();
  void leave();
  void report_abort(int round);
  std::string describe(size_t i) const;

  LaunchOptions o_;
  SignalPipe signals_;
  int pending_signal_ = 0;   // first SIGINT/SIGTERM/... received: the launcher's exit is 128+it
  bool store_ok_ = true;     // false once the store failed: nothing more is written to it
  std::unique_ptr<LauncherStore> store_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;  // by local rank
  std::vector<std::unique_ptr<RankOutput>> outputs_;     // by local rank
  std::vector<bool> stopped_;                            // signalled by us while running
  int first_failed_ = -1;                                // first worker reaped with a failure
};

bool Supervisor::interrupted() {
  pending_signal_ = signals_.poll_signal();
  return pending_signal_ != 0;
}

void Supervisor::start_workers(int round) {
  workers_.clear();
  outputs_.clear();
  stopped_.assign(size_t(o_.nproc_per_node), false);
  first_failed_ = -1;
  std::string attempt_dir;
  if (!o_.log_dir.empty()) {
    attempt_dir = fmt::format("{}/attempt_{}", o_.log_dir, round);
    std::error_code ec;
    std::filesystem::create_directories(attempt_dir, ec);
    if (ec) throw InputError(fmt::format("run: cannot create log directory {}: {}", attempt_dir, ec.message()));
  }
  for (int local = 0; local < o_.nproc_per_node; ++local) {
    auto spec = make_worker_spec(o_, local, round, store_->port());
    bool console = o_.local_ranks_filter.empty() || o_.local_ranks_filter.count(local) > 0;
    auto log = attempt_dir.empty() ? "" : fmt::format("{}/rank_{}.log", attempt_dir, spec.rank);
    outputs_.push_back(std::make_unique<RankOutput>(spec.rank, console, log));
    workers_.push_back(std::make_unique<WorkerProcess>(spec));
  }
}

// Waits up to `timeout_ms` for output, a worker exit or a signal, and handles whatever came.
void Supervisor::pump(int timeout_ms) {
  std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
  std::vector<std::pair<size_t, int>> owners{{0, -1}};  // (worker, stream) of each fd
  for (size_t i = 0; i < workers_.size(); ++i) {
    for (int stream = 0; stream < 2; ++stream) {
      int fd = stream == 0 ? workers_[i]->stdout_fd() : workers_[i]->stderr_fd();
      if (fd < 0) continue;
      fds.push_back({fd, POLLIN, 0});
      owners.emplace_back(i, stream);
    }
  }
  if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) throw std::runtime_error("run: poll failed");
  interrupted();
  for (size_t k = 1; k < fds.size(); ++k) {
    if (!fds[k].revents) continue;
    auto [i, stream] = owners[k];
    if (!outputs_[i]->read_from(fds[k].fd, stream)) workers_[i]->close_fd(stream);
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!workers_[i]->try_reap()) continue;
    // Whatever the worker wrote before exiting is in its pipes now: take it before judging.
    for (int stream = 0; stream < 2; ++stream) {
      int fd = stream == 0 ? workers_[i]->stdout_fd() : workers_[i]->stderr_fd();
      if (fd >= 0 && !outputs_[i]->read_from(fd, stream)) workers_[i]->close_fd(stream);
    }
    if (!workers_[i]->status()->ok() && !stopped_[i] && first_failed_ < 0) first_failed_ = int(i);
  }
}

Outcome Supervisor::monitor(int round) {
  bool marked_done = false;
  auto next_store_poll = Clock::now();
  while (true) {
    pump(std::min(ms_until(next_store_poll), 1000));
    if (pending_signal_) return {Outcome::kInterrupted, {}, -1};
    if (first_failed_ >= 0) {
      RoundFailure failure{o_.node_rank, describe(size_t(first_failed_)), false};
      try {
        store_->report_failure(round, failure);
      } catch (const std::exception&) {
        store_ok_ = false;  // we stop anyway; the other nodes will lose the store or time out
      }
      return {Outcome::kFailed, failure, first_failed_};
    }
    bool all_exited = std::none_of(workers_.begin(), workers_.end(), [](auto& w) { return w->running(); });
    if (Clock::now() < next_store_poll && !(all_exited && !marked_done)) continue;
    next_store_poll = after(o_.monitor_interval_s);
    try {
      if (all_exited && !marked_done) {
        store_->mark_done(round);
        marked_done = true;
      }
      if (auto failure = store_->failure(round)) return {Outcome::kFailed, *failure, -1};
      if (marked_done && store_->all_done(round)) return {Outcome::kSucceeded, {}, -1};
      if (auto peer = store_->silent_peer(round)) {
        RoundFailure failure{o_.node_rank,
                             fmt::format("node {}'s launcher stopped responding for {}s", *peer,
                                         LauncherStore::kPeerTimeout.count()),
                             false};
        store_->report_failure(round, failure);
        return {Outcome::kFailed, failure, -1};
      }
    } catch (const std::exception& e) {
      store_ok_ = false;
      return {Outcome::kFailed,
              {o_.node_rank,
               fmt::format("lost the rendezvous store at {}:{}: {}", o_.master_addr, store_->port(),
                           first_line(e.what())),
               true},
              -1};
    }
  }
}

// SIGTERM (or the signal the launcher received) to every worker's process group, SIGKILL to
// those still alive after --term-timeout. Bounded: SIGKILL cannot be ignored.
void Supervisor::stop_workers(int signo) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i]->running()) stopped_[i] = true;
    workers_[i]->signal_group(signo);
  }
  int signals_before = signals_.count();
  auto any_running = [&] {
    return std::any_of(workers_.begin(), workers_.end(), [](auto& w) { return w->running(); });
  };
  auto deadline = after(o_.term_timeout_s);
  // A further signal (Ctrl-C twice) cuts the grace period short.
  while (any_running() && Clock::now() < deadline && signals_.count() == signals_before) {
    pump(std::min(ms_until(deadline), 100));
  }
  if (any_running()) {
    for (auto& w : workers_) w->signal_group(SIGKILL);
    auto kill_deadline = after(5);
    while (any_running() && Clock::now() < kill_deadline) pump(std::min(ms_until(kill_deadline), 100));
  }
}

void Supervisor::finish_round() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    // Whatever a finished worker left running in its process group goes with it.
    workers_[i]->signal_group(SIGKILL);
    for (int stream = 0; stream < 2; ++stream) {
      int fd = stream == 0 ? workers_[i]->stdout_fd() : workers_[i]->stderr_fd();
      if (fd >= 0) outputs_[i]->read_from(fd, stream);
      workers_[i]->close_fd(stream);
    }
    outputs_[i]->flush();
  }
}

std::string Supervisor::describe(size_t i) const {
  const auto& w = *workers_[i];
  std::string state = w.status() ? w.status()->describe() : "is still running";
  return fmt::format("rank {} (pid {}) {}", w.rank(), w.pid(), state);
}

void Supervisor::print_summary(const Outcome& outcome, int round) const {
  const auto& f = outcome.failure;
  std::string out = fmt::format("ctitan run: failure summary (round {}, {} of {} restarts used)\n", round, round,
                                o_.max_restarts);
  out += fmt::format("  root cause: {}{}\n", f.what, f.node == o_.node_rank ? "" : fmt::format(" on node {}", f.node));
  if (outcome.failed_local >= 0) {
    const auto& tail = outputs_[size_t(outcome.failed_local)]->tail();
    out += fmt::format("  last {} lines of rank {}:\n", tail.size(), workers_[size_t(outcome.failed_local)]->rank());
    for (const auto& line : tail) out += fmt::format("    [rank{}]:{}\n", workers_[size_t(outcome.failed_local)]->rank(), line);
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (int(i) == outcome.failed_local) continue;
    const auto& s = workers_[i]->status();
    std::string note = stopped_[i] && s && s->signal ? " (stopped by the launcher)" : "";
    out += fmt::format("  {}{}\n", describe(i), note);
  }
  out += fmt::format("ctitan: run failed: {}{}\n", f.what, f.node == o_.node_rank ? "" : fmt::format(" on node {}", f.node));
  ssize_t ignored = write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

// Tells the other nodes to stop for good: this launcher was interrupted and will not rejoin.
void Supervisor::report_abort(int round) {
  if (!store_ok_) return;
  try {
    store_->report_failure(round, {o_.node_rank,
                                   fmt::format("node {}'s launcher got {}", o_.node_rank, signal_name(pending_signal_)),
                                   true});
  } catch (const std::exception&) {
    store_ok_ = false;
  }
}

// Every launcher leaves the job once, however it ends; node 0, whose exit takes the store down,
// first waits (bounded) until the others have read the outcome from it.
void Supervisor::leave() {
  if (!store_ok_) return;
  try {
    store_->leave();
    // Long enough for the other launchers to stop their workers after reading the outcome.
    store_->wait_for_peers_to_leave(std::chrono::milliseconds(int64_t(o_.term_timeout_s * 1000) + 10000));
  } catch (const std::exception&) {
  }
}

int Supervisor::run() {
  store_ = std::make_unique<LauncherStore>(o_, [this] { return interrupted(); });
  if (!store_->connected()) return 128 + pending_signal_;
  int first_rank = o_.node_rank * o_.nproc_per_node;
  spdlog::info("run: node {} of {}: ranks {}-{} of {}, store at {}:{}", o_.node_rank, o_.nnodes, first_rank,
               first_rank + o_.nproc_per_node - 1, o_.nnodes * o_.nproc_per_node, o_.master_addr, store_->port());
  int code = 0;
  try {
    code = run_rounds();
  } catch (...) {
    leave();
    throw;
  }
  leave();
  return code;
}

int Supervisor::run_rounds() {
  for (int round = 0;; ++round) {
    auto joined = store_->join(round, [this] { return interrupted(); });
    if (joined == LauncherStore::Join::kAborted) {
      auto failure = store_->failure(round);
      throw InputError(fmt::format("run: stopping: {}", failure ? failure->what : "another node aborted"));
    }
    Outcome outcome{Outcome::kInterrupted, {}, -1};
    if (joined == LauncherStore::Join::kJoined) {
      start_workers(round);
      outcome = monitor(round);
      if (outcome.kind == Outcome::kSucceeded) {
        finish_round();
        spdlog::info("run: all {} workers of round {} exited 0", o_.nnodes * o_.nproc_per_node, round);
        return 0;
      }
      stop_workers(outcome.kind == Outcome::kInterrupted ? pending_signal_ : SIGTERM);
      finish_round();
    }
    if (pending_signal_) {
      report_abort(round);
      fmt::print(stderr, "ctitan: run: stopped by {}; workers of node {} stopped\n", signal_name(pending_signal_),
                 o_.node_rank);
      return 128 + pending_signal_;
    }
    if (!outcome.failure.abort && round < o_.max_restarts) {
      spdlog::warn("run: round {} failed: {}; restarting ({} of {} restarts)", round, outcome.failure.what,
                   round + 1, o_.max_restarts);
      continue;
    }
    print_summary(outcome, round);
    return 1;
  }
}

}  // namespace

void validate(const LaunchOptions& o) {
  auto fail = [](const std::string& message) { throw InputError("run: " + message, 2); };
  if (o.nproc_per_node < 1) fail(fmt::format("--nproc-per-node must be at least 1 (got {})", o.nproc_per_node));
  if (o.nnodes < 1) fail(fmt::format("--nnodes must be at least 1 (got {})", o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    fail(fmt::format("--node-rank must be in [0, {}) for --nnodes {} (got {})", o.nnodes, o.nnodes, o.node_rank));
  }
  if (o.master_port < 0 || o.master_port > 65535) fail(fmt::format("--master-port {} is not a port", o.master_port));
  if (o.master_port == 0 && o.nnodes > 1) {
    fail("--master-port 0 (pick a free port) needs --nnodes 1: the other nodes could not learn the port; "
         "give every node the same fixed port");
  }
  if (o.max_restarts < 0) fail(fmt::format("--max-restarts must be >= 0 (got {})", o.max_restarts));
  for (int r : o.local_ranks_filter) {
    if (r < 0 || r >= o.nproc_per_node) {
      fail(fmt::format("--local-ranks-filter: local rank {} is not in [0, {})", r, o.nproc_per_node));
    }
  }
  if (!(o.monitor_interval_s > 0)) fail("--monitor-interval must be > 0 seconds");
  if (!(o.rdzv_timeout_s > 0)) fail("--rdzv-timeout must be > 0 seconds");
  if (!(o.term_timeout_s >= 0)) fail("--term-timeout must be >= 0 seconds");
  if (o.command.empty()) {
    fail(o.exec ? "--exec needs a program to run: ctitan run [flags] --exec PROG [ARGS...]"
                : "missing the command to run: ctitan run [flags] train --config FILE (or --exec PROG ARGS...)");
  }
}

int launch(const LaunchOptions& options) {
  validate(options);
  make_worker_spec(options, 0, 0, options.master_port);  // a missing program fails before the store starts
  Supervisor supervisor(options);
  return supervisor.run();
}

}  // namespace ctitan::distributed
