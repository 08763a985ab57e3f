#pragma once
// How the launchers of a job agree on rounds, through the job's TCPStore (hosted by node 0's
// launcher, the one the workers also use). Keys live under "launcher/round{k}/", apart from
// the workers' "round{k}/" prefix:
//   node{r}     node r joined round k (an add() counter: 2 means two launchers claim rank r)
//   nproc{r}    node r's --nproc-per-node, checked to be the same everywhere
//   members     the nodes of round k, "0,1,3", written once by node 0 when the round closes:
//               when every node joined, or (elastic) when at least MIN did and no more came
//               within --last-call-timeout. A node's rank in the round is its index here.
//   failed      the node whose report ends the round; failure{r}: what it reported
//   done        how many nodes saw all their workers exit 0; the round succeeded at nnodes
//   beat{r}     node r's heartbeat while its workers run
//   rescale     (elastic) a node waits to join: the round ends so that the next one admits it
// and, for the whole job:
//   launcher/abort  a launcher was interrupted: every node stops, nobody restarts
//   launcher/connected, launcher/left   launchers that reached the store, and those that
//                   finished; node 0 keeps the store up until all that came have left
//   launcher/lost{r}, launcher/lost     node r was found lost; how many were (they never leave)
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ctitan/launcher/launcher.h"

namespace ctitan::launcher {

struct RoundFailure {
  int node = 0;
  std::string what;    // "rank 3 (pid 123) exited with code 1"
  bool abort = false;  // a launcher was stopped by a signal: stop everywhere, never restart
};

class LauncherStore {
 public:
  // Node 0 hosts the store on --master-port (0: a free one); other nodes connect, retrying until
  // the rendezvous timeout. Returns early (connected() false) when `interrupted` turns true.
  // Throws InputError naming the address when the port is taken or never answers.
  LauncherStore(const LaunchOptions& options, const std::function<bool()>& interrupted);

  bool connected() const { return store_ != nullptr; }
  int port() const { return port_; }

  enum class Join { kJoined, kLate, kInterrupted, kAborted };
  // Announces this node in `round` and waits until the round closes (see "members" above).
  // kLate: the round (elastic) started without this node; join the next one. kAborted: another
  // launcher was interrupted (see failure()). Throws InputError naming the node ranks that never
  // arrived within --rdzv-timeout, or when nodes disagree on --nproc-per-node.
  Join join(int round, const std::function<bool()>& interrupted);
  // The nodes of the round last joined, ascending; this node's rank in it.
  const std::vector<int>& members() const { return members_; }
  int rank_in_round() const;
  // Elastic: a node that is not in `round` and waits to join the next one (scale up).
  std::optional<int> waiting_node(int round);
  // Ends `round` to admit waiting nodes; a failure in a round ended so uses no restart (as
  // torchelastic, membership changes are not failures).
  void mark_rescale(int round);
  bool rescaling(int round);

  // failure.abort also ends every later round.
  void report_failure(int round, const RoundFailure& failure);
  // The abort of the job if any, else the failure that ended `round`, if any.
  std::optional<RoundFailure> failure(int round);
  void mark_done(int round);
  bool all_done(int round);
  // Beats for this node (at most once a second) and returns a member of `round` whose launcher
  // has not beaten for --heartbeat-timeout (killed, or its host gone: its workers are then gone
  // too, and ours would wait for them until a collective timed out).
  std::optional<int> silent_peer(int round);
  // A lost node will never leave: node 0 stops waiting for it at the end (counted once).
  void mark_lost(int node);
  // Every launcher leaves once, when it is done with the job; node 0 then waits (bounded) until
  // all have, so that nobody loses the store while reading the outcome.
  void leave();
  void wait_for_peers_to_leave(std::chrono::milliseconds timeout);

 private:
  std::string key(int round, const std::string& name) const;
  std::optional<std::vector<int>> read_members(int round);
  std::vector<int> joined_nodes(int round);
  void check_same_nproc(int round);

  LaunchOptions options_;
  std::vector<int> members_;
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
