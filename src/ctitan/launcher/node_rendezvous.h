#pragma once
// How the launchers of a job agree on rounds, through the job's TCPStore (hosted by node 0's
// launcher, the one the workers also use). Keys live under "launcher/round{k}/", apart from
// the workers' "round{k}/" prefix:
//   node{r}     node r joined round k (an add() counter: 2 means two launchers claim rank r)
//   nproc{r}    node r's --nproc-per-node, checked to be the same everywhere
//   failed      the node whose report ends the round; failure{r}: what it reported
//   done        how many nodes saw all their workers exit 0; the round succeeded at nnodes
//   beat{r}     node r's heartbeat while its workers run
// and, for the whole job:
//   launcher/abort  a launcher was interrupted: every node stops, nobody restarts
//   launcher/connected, launcher/left   launchers that reached the store, and those that
//                   finished; node 0 keeps the store up until all that came have left
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "ctitan/launcher/launcher.h"

namespace ctitan::launcher {

struct RoundFailure {
  int node = 0;
  std::string what;    // "rank 3 (pid 123) exited with code 1"
  bool abort = false;  // a launcher was stopped by a signal: stop everywhere, never restart
};

class LauncherStore {
 public:
  // A peer whose heartbeat stands still this long is taken for dead (its launcher was killed,
  // so its workers were too, and ours would wait for them until a collective timed out).
  static constexpr std::chrono::seconds kPeerTimeout{30};

  // Node 0 hosts the store on --master-port (0: a free one); other nodes connect, retrying until
  // the rendezvous timeout. Returns early (connected() false) when `interrupted` turns true.
  // Throws InputError naming the address when the port is taken or never answers.
  LauncherStore(const LaunchOptions& options, const std::function<bool()>& interrupted);

  bool connected() const { return store_ != nullptr; }
  int port() const { return port_; }

  enum class Join { kJoined, kInterrupted, kAborted };
  // Announces this node in `round` and waits for every node. kAborted: another launcher was
  // interrupted (see failure()). Throws InputError naming the node ranks that never arrived
  // within --rdzv-timeout, or when nodes disagree on --nproc-per-node.
  Join join(int round, const std::function<bool()>& interrupted);

  // failure.abort also ends every later round.
  void report_failure(int round, const RoundFailure& failure);
  // The abort of the job if any, else the failure that ended `round`, if any.
  std::optional<RoundFailure> failure(int round);
  void mark_done(int round);
  bool all_done(int round);
  // Beats for this node (at most once a second) and returns a peer that stopped beating.
  std::optional<int> silent_peer(int round);
  // Every launcher leaves once, when it is done with the job; node 0 then waits (bounded) until
  // all have, so that nobody loses the store while reading the outcome.
  void leave();
  void wait_for_peers_to_leave(std::chrono::milliseconds timeout);

 private:
  std::string key(int round, const std::string& name) const;

  LaunchOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  int port_ = 0;
  struct Beat {
    int64_t value = -1;
    std::chrono::steady_clock::time_point changed;
  };
  int beat_round_ = -1;
  std::map<int, Beat> peer_beats_;
  std::chrono::steady_clock::time_point last_beat_{};
};

}  // namespace ctitan::launcher
