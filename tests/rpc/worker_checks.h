#pragma once
// The checks rpc_test_worker's scenarios make: each counts, and a failed one throws CheckFailed,
// which the worker's main turns into one "FAILED" line and exit code 1.
#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "ctitan/rpc/errors.h"

namespace rpc_test {

namespace rpc = ctitan::rpc;

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline int checks = 0;

inline void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) throw CheckFailed(what);
}

// Runs `call`, which must throw E whose what() equals `text` (or contains it, when `exact` is false).
template <typename E, typename F>
E expect_error(F&& call, const std::string& text, bool exact, const std::string& what) {
  try {
    call();
  } catch (const E& e) {
    const std::string got = e.what();
    check(exact ? got == text : got.find(text) != std::string::npos,
          fmt::format("{}: error text [{}], expected {}[{}]", what, got, exact ? "" : "it to contain ", text));
    check(got.find('\n') == std::string::npos, what + ": the error is not one line");
    return e;
  }
  throw CheckFailed(what + ": no error, or an error of another type");
}

inline const char* kind_name(rpc::RpcErrorKind kind) {
  switch (kind) {
    case rpc::RpcErrorKind::Timeout: return "Timeout";
    case rpc::RpcErrorKind::Remote: return "Remote";
    case rpc::RpcErrorKind::UnknownFunction: return "UnknownFunction";
    case rpc::RpcErrorKind::BadArguments: return "BadArguments";
    case rpc::RpcErrorKind::PeerLost: return "PeerLost";
    case rpc::RpcErrorKind::Shutdown: return "Shutdown";
  }
  return "?";
}

// `text` must be the whole message, or its beginning when `prefix_only`.
inline void expect_rpc_error(rpc::RpcErrorKind kind, const std::function<void()>& call, const std::string& text,
                             const std::string& what, bool prefix_only = false) {
  rpc::RpcError e = expect_error<rpc::RpcError>(call, text, !prefix_only, what);
  if (prefix_only) check(std::string(e.what()).rfind(text, 0) == 0, fmt::format("{}: [{}] does not start with [{}]", what, e.what(), text));
  check(e.kind() == kind, fmt::format("{}: kind {}, expected {}", what, kind_name(e.kind()), kind_name(kind)));
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Polls `done` every 20 ms for at most `seconds` (a generous bound: the machine is shared).
inline void wait_until(const std::function<bool()>& done, double seconds, const std::string& what) {
  auto t0 = std::chrono::steady_clock::now();
  while (!done()) {
    if (seconds_since(t0) > seconds) throw CheckFailed(fmt::format("{}: not within {:g} s", what, seconds));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ++checks;
}

// Who this worker is in a scenario.
struct Worker {
  std::string self;  // "worker<rank>"
  int rank = 0;
  int world_size = 0;
  std::string name(int rank) const { return fmt::format("worker{}", rank); }
};

}  // namespace rpc_test
