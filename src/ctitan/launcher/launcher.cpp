// The supervisor of `ctitan run`: one loop per restart round.
//   join the round on the store -> start the workers -> monitor -> stop -> restart or exit
// Monitoring waits in poll(2) on the workers' pipes and the signal pipe (SIGCHLD included), so
// output, worker exits and Ctrl-C are handled the moment they happen; the store is polled every
// --monitor-interval for what the other nodes report.
#include "ctitan/launcher/launcher.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "ctitan/common/error.h"
#include "ctitan/common/message_text.h"
#include "ctitan/launcher/worker_group.h"
#include "ctitan/launcher/node_rendezvous.h"
#include "ctitan/launcher/signals.h"
#include "ctitan/launcher/worker_process.h"

namespace ctitan::launcher {
namespace {

using Clock = std::chrono::steady_clock;


struct Outcome {
  enum Kind { kSucceeded, kFailed, kInterrupted, kRescale } kind = kSucceeded;
  RoundFailure failure;   // kFailed
  int failed_local = -1;  // kFailed here: local index of the worker at fault
};

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& options) : o_(options) {}
  int run();

 private:
  int run_rounds();
  Outcome monitor(int round);
  bool interrupted() { return signals_.poll_signal() != 0; }
  void report_abort(int round);
  void leave();
  void print_summary(const Outcome& outcome, int round, int restarts) const;
  // This node's options for the round just joined: an elastic round numbers its nodes anew.
  LaunchOptions round_options() const;

  LaunchOptions o_;
  SignalPipe signals_;
  bool store_ok_ = true;  // false once the store failed: nothing more is written to it
  std::unique_ptr<LauncherStore> store_;
  std::unique_ptr<WorkerGroup> group_;
};

int Supervisor::run() {
  store_ = std::make_unique<LauncherStore>(o_, [this] { return interrupted(); });
  if (!store_->connected()) {
    int signo = signals_.poll_signal();
    fmt::print(stderr, "ctitan: run: node {} stopped by {} while waiting for the store\n", o_.node_rank,
               signal_name(signo));
    return 128 + signo;
  }
  if (o_.elastic()) {
    spdlog::info("run: node {} of {}-{} (elastic), {} workers, store at {}:{}", o_.node_rank, o_.min_nnodes, o_.nnodes,
                 o_.nproc_per_node, o_.master_addr, store_->port());
  } else {
    int first_rank = o_.node_rank * o_.nproc_per_node;
    spdlog::info("run: node {} of {}: ranks {}-{} of {}, store at {}:{}", o_.node_rank, o_.nnodes, first_rank,
                 first_rank + o_.nproc_per_node - 1, o_.nnodes * o_.nproc_per_node, o_.master_addr, store_->port());
  }
  int code = 0;
  try {
    code = run_rounds();
  } catch (...) {
    group_.reset();  // SIGKILLs any worker still running: an exception must not leave orphans
    leave();
    throw;
  }
  leave();
  return code;
}

LaunchOptions Supervisor::round_options() const {
  LaunchOptions round = o_;
  round.nnodes = int(store_->members().size());
  round.node_rank = store_->rank_in_round();
  return round;
}

int Supervisor::run_rounds() {
  int restarts = 0;
  for (int round = 0;; ++round) {
    auto joined = store_->join(round, [this] { return interrupted(); });
    if (joined == LauncherStore::Join::kAborted) {
      auto failure = store_->failure(round);
      throw InputError(fmt::format("run: stopping: {}", failure ? failure->what : "another node aborted"));
    }
    if (joined == LauncherStore::Join::kLate) {
      spdlog::info("run: round {} started with nodes {} before node {} arrived; joining the next round", round,
                   fmt::join(store_->members(), ","), o_.node_rank);
      continue;
    }
    Outcome outcome{Outcome::kInterrupted, {}, -1};
    if (joined == LauncherStore::Join::kJoined) {
      auto options = round_options();
      if (o_.elastic()) {
        spdlog::info("run: round {}: nodes {}, world size {}; this node is group rank {}", round,
                     fmt::join(store_->members(), ","), options.nnodes * o_.nproc_per_node, options.node_rank);
      }
      group_ = std::make_unique<WorkerGroup>(options, round, store_->port(), signals_);
      outcome = monitor(round);
      if (outcome.kind == Outcome::kSucceeded) {
        group_->finish();
        spdlog::info("run: all {} workers of round {} exited 0", options.nnodes * o_.nproc_per_node, round);
        return 0;
      }
      // Forward the launcher's own signal; otherwise SIGTERM, as torchrun does.
      int signo = signals_.poll_signal();
      group_->stop(signo ? signo : SIGTERM, o_.term_timeout_s);
      group_->finish();
    }
    if (int signo = signals_.poll_signal()) {
      report_abort(round);
      fmt::print(stderr, "ctitan: run: node {} stopped by {}{}\n", o_.node_rank, signal_name(signo),
                 group_ ? ", and its workers with it" : "");
      return 128 + signo;
    }
    bool rescale = outcome.kind == Outcome::kRescale;
    if (!rescale && !outcome.failure.abort && store_ok_) {
      try {
        rescale = store_->rescaling(round);  // a worker failed because another node stopped its own
      } catch (const std::exception&) {
        store_ok_ = false;
      }
    }
    if (rescale) {
      spdlog::warn("run: round {} ended to admit a waiting node; restarting with it (no restart used)", round);
      continue;
    }
    if (!outcome.failure.abort && restarts < o_.max_restarts) {
      ++restarts;
      spdlog::warn("run: round {} failed: {}; restarting ({} of {} restarts)", round, outcome.failure.what, restarts,
                   o_.max_restarts);
      continue;
    }
    print_summary(outcome, round, restarts);
    return 1;
  }
}

Outcome Supervisor::monitor(int round) {
  bool marked_done = false;
  auto next_store_poll = Clock::now();
  while (true) {
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_store_poll - Clock::now()).count();
    group_->pump(int(std::clamp<int64_t>(wait, 0, 1000)));
    if (interrupted()) return {Outcome::kInterrupted, {}, -1};
    if (int local = group_->first_failure(); local >= 0) {
      RoundFailure failure{o_.node_rank, group_->describe(local), false};
      try {
        store_->report_failure(round, failure);
      } catch (const std::exception&) {
        store_ok_ = false;  // we stop anyway; the other nodes will lose the store or time out
      }
      return {Outcome::kFailed, failure, local};
    }
    bool just_done = !marked_done && !group_->any_running();
    if (Clock::now() < next_store_poll && !just_done) continue;
    next_store_poll = Clock::now() + std::chrono::microseconds(int64_t(o_.monitor_interval_s * 1e6));
    try {
      if (just_done) {
        store_->mark_done(round);
        marked_done = true;
      }
      if (auto failure = store_->failure(round)) return {Outcome::kFailed, *failure, -1};
      if (marked_done && store_->all_done(round)) return {Outcome::kSucceeded, {}, -1};
      if (auto peer = store_->silent_peer(round)) {
        RoundFailure failure{o_.node_rank,
                             fmt::format("node {} is lost: its launcher sent no heartbeat for {}s "
                                         "(--heartbeat-timeout)",
                                         *peer, o_.heartbeat_timeout_s),
                             false};
        store_->mark_lost(*peer);
        store_->report_failure(round, failure);
        return {Outcome::kFailed, failure, -1};
      }
      if (auto waiting = store_->waiting_node(round)) {
        spdlog::info("run: node {} waits to join (--nnodes {}:{})", *waiting, o_.min_nnodes, o_.nnodes);
        store_->mark_rescale(round);
        return {Outcome::kRescale, {}, -1};
      }
    } catch (const std::exception& e) {
      store_ok_ = false;
      RoundFailure lost{o_.node_rank,
                        fmt::format("lost the rendezvous store at {}:{}: {}", o_.master_addr, store_->port(),
                                    first_line(e.what())),
                        true};
      return {Outcome::kFailed, lost, -1};
    }
  }
}

// Tells the other nodes to stop for good: this launcher was interrupted and will not rejoin.
void Supervisor::report_abort(int round) {
  if (!store_ok_) return;
  try {
    auto what = fmt::format("node {}'s launcher got {}", o_.node_rank, signal_name(signals_.poll_signal()));
    store_->report_failure(round, {o_.node_rank, what, true});
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

void Supervisor::print_summary(const Outcome& outcome, int round, int restarts) const {
  const auto& f = outcome.failure;
  std::string where = f.node == o_.node_rank ? "" : fmt::format(" on node {}", f.node);
  std::string out = fmt::format("ctitan run: failure summary (round {}, {} of {} restarts used)\n", round, restarts,
                                o_.max_restarts);
  out += fmt::format("  root cause: {}{}\n", f.what, where);
  if (group_) out += group_->report(outcome.failed_local);
  out += fmt::format("ctitan: run failed: {}{}\n", f.what, where);
  ssize_t ignored = write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

}  // namespace

void validate(const LaunchOptions& o) {
  auto fail = [](const std::string& message) { throw InputError("run: " + message, 2); };
  if (o.nproc_per_node < 1) fail(fmt::format("--nproc-per-node must be at least 1 (got {})", o.nproc_per_node));
  if (o.nnodes < 1) fail(fmt::format("--nnodes must be at least 1 (got {})", o.nnodes));
  if (o.min_nnodes < 0 || o.min_nnodes > o.nnodes) {
    fail(fmt::format("--nnodes {}:{}: MIN must be in [1, MAX]", o.min_nnodes, o.nnodes));
  }
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
  for (const auto* routing : {&o.redirects, &o.tee}) {
    for (auto [rank, streams] : *routing) {
      if (rank >= o.nproc_per_node) fail(fmt::format("--tee/--redirects: local rank {} is not in [0, {})", rank, o.nproc_per_node));
      if (streams != 0 && o.log_dir.empty()) fail("--tee and --redirects write to files: give --log-dir DIR");
    }
  }
  if (!(o.monitor_interval_s > 0)) fail("--monitor-interval must be > 0 seconds");
  if (!(o.rdzv_timeout_s > 0)) fail("--rdzv-timeout must be > 0 seconds");
  if (!(o.term_timeout_s >= 0)) fail("--term-timeout must be >= 0 seconds");
  if (!(o.heartbeat_timeout_s > 0) || !std::isfinite(o.heartbeat_timeout_s)) {
    fail("--heartbeat-timeout must be > 0 seconds");
  }
  if (!(o.last_call_timeout_s >= 0) || !std::isfinite(o.last_call_timeout_s)) {
    fail("--rdzv-conf last_call_timeout must be >= 0 seconds");
  }
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

}  // namespace ctitan::launcher
