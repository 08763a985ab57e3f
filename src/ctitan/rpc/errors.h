#pragma once
// RpcError: how a failed call reaches the caller, one line naming the worker and the function.
// Bad input of the caller's own (an unknown worker, a value that cannot be encoded, a malformed
// payload) is an InputError instead (common/error.h).
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ctitan::rpc {

enum class RpcErrorKind {
  Timeout,          // the reply did not arrive within the call's timeout
  Remote,           // the function threw on the callee, or its result could not be sent back
  UnknownFunction,  // no function of that name is registered on the callee
  BadArguments,     // the arguments do not match the function's parameters
  PeerLost,         // any other agent error: the connection to the callee broke
  Shutdown,         // the call was made before init_rpc or after shutdown
};

class RpcError : public std::runtime_error {
 public:
  RpcError(RpcErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  RpcErrorKind kind() const { return kind_; }

 private:
  RpcErrorKind kind_;
};

// Thrown by the callee's argument conversion (ivalue_convert.h, registry.h) and sent back as
// status "bad arguments"; `what()` is e.g. "argument 2 expected Tensor, got int".
class ArgumentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The message builders: one place for every error text a caller can see.
namespace message {

inline std::string timeout(const std::string& to, const std::string& fn, double seconds) {
  return fmt::format("rpc to {} '{}' ran for more than {:g} s", to, fn, seconds);
}
inline std::string remote(const std::string& to, const std::string& fn, const std::string& what) {
  return fmt::format("rpc to {} '{}' failed on {}: {}", to, fn, to, what);
}
inline std::string unknown_function(const std::string& to, const std::string& fn) {
  return fmt::format("rpc to {}: no function '{}' is registered there", to, fn);
}
inline std::string bad_arguments(const std::string& to, const std::string& fn, const std::string& what) {
  return fmt::format("rpc to {} '{}': {}", to, fn, what);
}
inline std::string peer_lost(const std::string& to, const std::string& fn, const std::string& agent_text) {
  return fmt::format("rpc to {} '{}' failed: connection to {} lost ({})", to, fn, to, agent_text);
}
inline std::string after_shutdown(const std::string& fn) { return fmt::format("rpc '{}' after shutdown", fn); }
inline std::string before_init(const std::string& fn) {
  return fmt::format("rpc '{}' before init_rpc: call ctitan::rpc::init_rpc first", fn);
}

}  // namespace message
}  // namespace ctitan::rpc
