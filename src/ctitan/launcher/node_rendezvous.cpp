#include "ctitan/launcher/node_rendezvous.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <thread>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/distributed/c10d_quiet.h"

namespace ctitan::launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(50);
const std::string kAbortKey = "launcher/abort";
const std::string kLeftKey = "launcher/left";
const std::string kConnectedKey = "launcher/connected";

std::chrono::milliseconds to_ms(double seconds) { return std::chrono::milliseconds(int64_t(seconds * 1000)); }

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

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
    tcp.timeout = to_ms(options.rdzv_timeout_s);
    try {
      distributed::QuietC10dLogs quiet;  // the exception becomes the one line below
      auto store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, tcp);
      port_ = store->getPort();
      store_ = store;
      store_->add(kConnectedKey, 1);
    } catch (const std::exception& e) {
      throw InputError(fmt::format("run: cannot host the rendezvous store on {}:{}: {}", options.master_addr,
                                   options.master_port, first_line(e.what())));
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
  std::vector<std::string> everyone;
  for (int n = 0; n < options_.nnodes; ++n) everyone.push_back(key(round, fmt::format("node{}", n)));
  auto deadline = Clock::now() + to_ms(options_.rdzv_timeout_s);
  while (!store_->check(everyone)) {
    if (interrupted()) return Join::kInterrupted;
    if (store_->check({kAbortKey})) return Join::kAborted;
    if (Clock::now() > deadline) {
      std::vector<int> missing;
      for (int n = 0; n < options_.nnodes; ++n) {
        if (!store_->check({everyone[size_t(n)]})) missing.push_back(n);
      }
      throw InputError(fmt::format("run: rendezvous timed out after {}s in round {}: node rank(s) {} never arrived "
                                   "(--nnodes {}; start a launcher with each --node-rank)",
                                   options_.rdzv_timeout_s, round, fmt::join(missing, ", "), options_.nnodes));
    }
    std::this_thread::sleep_for(kPoll);
  }
  for (int n = 0; n < options_.nnodes; ++n) {
    auto theirs = text(store_->get(key(round, fmt::format("nproc{}", n))));
    if (theirs != std::to_string(options_.nproc_per_node)) {
      throw InputError(fmt::format("run: node {} runs --nproc-per-node {} but node {} runs {}; every node must "
                                   "use the same",
                                   n, theirs, me, options_.nproc_per_node),
                       2);
    }
  }
  return Join::kJoined;
}

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

bool LauncherStore::all_done(int round) { return store_->add(key(round, "done"), 0) >= options_.nnodes; }

std::optional<int> LauncherStore::silent_peer(int round) {
  if (options_.nnodes == 1) return std::nullopt;
  auto now = Clock::now();
  if (round != beat_round_) {
    beat_round_ = round;
    peer_beats_.clear();
    for (int n = 0; n < options_.nnodes; ++n) {
      if (n != options_.node_rank) peer_beats_[n] = Beat{-1, now};
    }
  }
  if (now - last_beat_ < std::chrono::seconds(1)) return std::nullopt;
  last_beat_ = now;
  store_->add(key(round, fmt::format("beat{}", options_.node_rank)), 1);
  for (auto& [node, beat] : peer_beats_) {
    int64_t value = store_->add(key(round, fmt::format("beat{}", node)), 0);
    if (value != beat.value) {
      beat = Beat{value, now};
    } else if (now - beat.changed > kPeerTimeout) {
      return node;
    }
  }
  return std::nullopt;
}

void LauncherStore::leave() { store_->add(kLeftKey, 1); }

void LauncherStore::wait_for_peers_to_leave(std::chrono::milliseconds timeout) {
  if (options_.node_rank != 0 || options_.nnodes == 1) return;
  auto deadline = Clock::now() + timeout;
  while (store_->add(kLeftKey, 0) < store_->add(kConnectedKey, 0) && Clock::now() < deadline) {
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace ctitan::launcher
