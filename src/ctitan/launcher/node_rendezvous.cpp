#include "ctitan/launcher/node_rendezvous.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <thread>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/common/message_text.h"
#include "ctitan/distributed/c10d_quiet.h"

namespace ctitan::launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(50);
const std::string kAbortKey = "launcher/abort";
const std::string kLeftKey = "launcher/left";
const std::string kConnectedKey = "launcher/connected";
const std::string kLostKey = "launcher/lost";

std::chrono::milliseconds to_ms(double seconds) { return std::chrono::milliseconds(int64_t(seconds * 1000)); }


std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// True when something accepts TCP connections at host:port now (waiting at most a second).
bool accepts_connections(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool ok = false;
  for (addrinfo* ai = found; ai && !ok; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      ok = poll(&p, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return ok;
}

// Empty when `host` names an address of this machine (some resolved address can be bound), else
// why not. Node 0 hosts the store at --master-addr: given another machine's address, c10d's own
// client would retry connecting to it until --rdzv-timeout, deaf to SIGTERM.
std::string not_local_reason(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "0", &hints, &found) != 0) return "it does not resolve";
  std::string why = "no address it resolves to belongs to this machine";
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    bool bound = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
    close(fd);
    if (bound) {
      why.clear();
      break;
    }
  }
  freeaddrinfo(found);
  return why;
}

}  // namespace

LauncherStore::LauncherStore(const LaunchOptions& options, const std::function<bool()>& interrupted)
    : options_(options) {
  c10d::TCPStoreOptions tcp;
  tcp.port = uint16_t(options.master_port);
  tcp.isServer = options.node_rank == 0;
  tcp.numWorkers = c10::nullopt;  // workers and launchers come and go by round: never wait for a count
  tcp.waitWorkers = false;
  // c10d retries an unresolvable name until --rdzv-timeout (ignoring SIGTERM), logging each try.
  if (auto why = distributed::host_resolution_error(options.master_addr); !why.empty()) {
    throw InputError(fmt::format("run: --master-addr '{}' cannot be resolved: {}", options.master_addr, why), 2);
  }
  if (tcp.isServer) {
    if (auto why = not_local_reason(options.master_addr); !why.empty()) {
      throw InputError(fmt::format("run: --node-rank 0 hosts the rendezvous store at --master-addr {}, but {}; "
                                   "give node 0 its own address",
                                   options.master_addr, why),
                       2);
    }
    tcp.timeout = to_ms(options.rdzv_timeout_s);
    try {
      distributed::QuietC10dLogs quiet;  // the exception becomes the one line below
      auto store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, tcp);
      port_ = store->getPort();
      store_ = store;
      store_->add(kConnectedKey, 1);
    } catch (const std::exception& e) {
      std::string what = first_line(e.what());
      if (what.find("EADDRINUSE") != std::string::npos || what.find("Address already in use") != std::string::npos) {
        what = "the port is already in use (another job, or a launcher still running?); pick another --master-port";
      }
      throw InputError(fmt::format("run: cannot host the rendezvous store on {}:{}: {}", options.master_addr,
                                   options.master_port, what));
    }
    return;
  }
  // Node 0 may start later than this node. Probe with a plain socket until something listens
  // (c10d would log an error line per refused attempt), noticing a signal within a second,
  // and give up at --rdzv-timeout.
  auto deadline = Clock::now() + to_ms(options.rdzv_timeout_s);
  std::string last_error = "nothing listens there";
  while (Clock::now() < deadline) {
    if (interrupted()) return;
    if (accepts_connections(options.master_addr, options.master_port)) {
      tcp.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        distributed::QuietC10dLogs quiet;
        store_ = c10::make_intrusive<c10d::TCPStore>(options.master_addr, tcp);
        port_ = options.master_port;
        store_->add(kConnectedKey, 1);
        return;
      } catch (const std::exception& e) {
        last_error = first_line(e.what());
      }
    }
    std::this_thread::sleep_for(kPoll);
  }
  throw InputError(fmt::format("run: node {} could not reach the rendezvous store at {}:{} within {}s "
                               "(is node 0's launcher running?): {}",
                               options.node_rank, options.master_addr, options.master_port,
                               options.rdzv_timeout_s, last_error));
}

std::string LauncherStore::key(int round, const std::string& name) const {
  return fmt::format("launcher/round{}/{}", round, name);
}

LauncherStore::Join LauncherStore::join(int round, const std::function<bool()>& interrupted) {
  const int me = options_.node_rank;
  store_->set(key(round, fmt::format("nproc{}", me)), bytes(std::to_string(options_.nproc_per_node)));
  if (store_->add(key(round, fmt::format("node{}", me)), 1) > 1) {
    throw InputError(fmt::format("run: two launchers joined round {} as --node-rank {}", round, me), 2);
  }
  auto deadline = Clock::now() + to_ms(options_.rdzv_timeout_s);
  std::optional<Clock::time_point> enough_since;  // node 0: since when at least MIN nodes are in
  while (true) {
    if (interrupted()) return Join::kInterrupted;
    if (store_->check({kAbortKey})) return Join::kAborted;
    if (auto members = read_members(round)) {
      members_ = *members;
      break;
    }
    // Node 0 closes the round: it hosts the store, so it is in every round.
    if (me == 0) {
      auto joined = joined_nodes(round);
      if (int(joined.size()) >= options_.fewest_nodes() && !enough_since) enough_since = Clock::now();
      if (int(joined.size()) == options_.nnodes ||
          (enough_since && Clock::now() - *enough_since >= to_ms(options_.last_call_timeout_s))) {
        store_->set(key(round, "members"), bytes(fmt::format("{}", fmt::join(joined, ","))));
        continue;
      }
    }
    if (Clock::now() > deadline) {
      auto joined = joined_nodes(round);
      std::vector<int> missing;
      for (int n = 0; n < options_.nnodes; ++n) {
        if (std::find(joined.begin(), joined.end(), n) == joined.end()) missing.push_back(n);
      }
      std::string wanted = options_.elastic() ? fmt::format("--nnodes {}:{}", options_.min_nnodes, options_.nnodes)
                                              : fmt::format("--nnodes {}", options_.nnodes);
      throw InputError(fmt::format("run: rendezvous timed out after {}s in round {}: node rank(s) {} never arrived "
                                   "({}; start a launcher with each --node-rank)",
                                   options_.rdzv_timeout_s, round, fmt::join(missing, ", "), wanted));
    }
    std::this_thread::sleep_for(kPoll);
  }
  if (rank_in_round() < 0) return Join::kLate;
  check_same_nproc(round);
  return Join::kJoined;
}

int LauncherStore::rank_in_round() const {
  auto it = std::find(members_.begin(), members_.end(), options_.node_rank);
  return it == members_.end() ? -1 : int(it - members_.begin());
}

std::optional<std::vector<int>> LauncherStore::read_members(int round) {
  if (!store_->check({key(round, "members")})) return std::nullopt;
  std::vector<int> members;
  std::stringstream in(text(store_->get(key(round, "members"))));
  for (std::string item; std::getline(in, item, ',');) members.push_back(std::stoi(item));
  return members;
}

std::vector<int> LauncherStore::joined_nodes(int round) {
  std::vector<int> joined;
  for (int n = 0; n < options_.nnodes; ++n) {
    if (store_->check({key(round, fmt::format("node{}", n))})) joined.push_back(n);
  }
  return joined;
}

void LauncherStore::check_same_nproc(int round) {
  for (int n : members_) {
    auto theirs = text(store_->get(key(round, fmt::format("nproc{}", n))));
    if (theirs != std::to_string(options_.nproc_per_node)) {
      throw InputError(fmt::format("run: node {} runs --nproc-per-node {} but node {} runs {}; every node must "
                                   "use the same",
                                   n, theirs, options_.node_rank, options_.nproc_per_node),
                       2);
    }
  }
}

std::optional<int> LauncherStore::waiting_node(int round) {
  if (!options_.elastic() || int(members_.size()) == options_.nnodes) return std::nullopt;
  for (int n = 0; n < options_.nnodes; ++n) {
    if (std::find(members_.begin(), members_.end(), n) != members_.end()) continue;
    if (store_->check({key(round + 1, fmt::format("node{}", n))})) return n;
  }
  return std::nullopt;
}

void LauncherStore::mark_rescale(int round) { store_->set(key(round, "rescale"), bytes("1")); }

bool LauncherStore::rescaling(int round) { return store_->check({key(round, "rescale")}); }

void LauncherStore::report_failure(int round, const RoundFailure& failure) {
  const int me = options_.node_rank;
  // The description is written before the flag that points to it, so readers never miss it.
  store_->set(key(round, fmt::format("failure{}", me)), bytes(failure.what));
  if (failure.abort) store_->set(kAbortKey, bytes(fmt::format("{} {}", me, failure.what)));
  store_->set(key(round, "failed"), bytes(std::to_string(me)));
}

std::optional<RoundFailure> LauncherStore::failure(int round) {
  if (store_->check({kAbortKey})) {
    auto value = text(store_->get(kAbortKey));
    auto space = value.find(' ');
    return RoundFailure{std::stoi(value.substr(0, space)), value.substr(space + 1), true};
  }
  if (!store_->check({key(round, "failed")})) return std::nullopt;
  int node = std::stoi(text(store_->get(key(round, "failed"))));
  return RoundFailure{node, text(store_->get(key(round, fmt::format("failure{}", node)))), false};
}

void LauncherStore::mark_done(int round) { store_->add(key(round, "done"), 1); }

bool LauncherStore::all_done(int round) { return store_->add(key(round, "done"), 0) >= int64_t(members_.size()); }

std::optional<int> LauncherStore::silent_peer(int round) {
  if (members_.size() < 2) return std::nullopt;
  auto now = Clock::now();
  if (round != beat_round_) {
    beat_round_ = round;
    peer_beats_.clear();
    for (int n : members_) {
      if (n != options_.node_rank) peer_beats_[n] = Beat{-1, now};
    }
  }
  // Several beats per timeout, so that one late beat is never taken for a lost node.
  auto timeout = to_ms(options_.heartbeat_timeout_s);
  if (now - last_beat_ < std::min<std::chrono::milliseconds>(std::chrono::seconds(1), timeout / 4)) {
    return std::nullopt;
  }
  last_beat_ = now;
  store_->add(key(round, fmt::format("beat{}", options_.node_rank)), 1);
  for (auto& [node, beat] : peer_beats_) {
    int64_t value = store_->add(key(round, fmt::format("beat{}", node)), 0);
    if (value != beat.value) {
      beat = Beat{value, now};
    } else if (now - beat.changed > timeout) {
      return node;
    }
  }
  return std::nullopt;
}

void LauncherStore::leave() { store_->add(kLeftKey, 1); }

void LauncherStore::mark_lost(int node) {
  if (store_->add(fmt::format("launcher/lost{}", node), 1) == 1) store_->add(kLostKey, 1);
}

void LauncherStore::wait_for_peers_to_leave(std::chrono::milliseconds timeout) {
  if (options_.node_rank != 0 || options_.nnodes == 1) return;
  auto deadline = Clock::now() + timeout;
  while (store_->add(kLeftKey, 0) + store_->add(kLostKey, 0) < store_->add(kConnectedKey, 0) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace ctitan::launcher
