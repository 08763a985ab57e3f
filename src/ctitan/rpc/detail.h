#pragma once
// Internal to src/ctitan/rpc (not for users): what the files that talk to upstream's agent
// (agent.cpp, rref.cpp, request_handler.cpp) share. Upstream types are only forward-declared, so
// that including this costs nothing.
#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "ctitan/rpc/errors.h"
#include "ctitan/rpc/wire.h"

namespace torch::distributed::rpc {
class RpcAgent;
class TensorPipeAgent;
struct WorkerInfo;
}  // namespace torch::distributed::rpc

namespace ctitan::rpc::detail {

// The running agent, or RpcError(Shutdown) naming `function`. `default_timeout`, if given, receives
// RpcOptions::timeout_seconds.
std::shared_ptr<torch::distributed::rpc::TensorPipeAgent> running_agent(const std::string& function,
                                                                        double* default_timeout);

// InputError listing the workers for an unknown name.
const torch::distributed::rpc::WorkerInfo& find_worker(const torch::distributed::rpc::RpcAgent& agent,
                                                       const std::string& name);

// The timeout a call waits (its own, or the default), after checking it is not negative.
double call_timeout(const std::optional<double>& requested, double default_timeout, const std::string& to,
                    const std::string& function);

// The RpcError of a reply that failed in transport: Timeout, or PeerLost for any other agent error.
[[noreturn]] void throw_transport_failure(const c10::ivalue::Future& reply, const std::string& to,
                                          const std::string& function, double timeout);

// Registers the functions ctitan's own RPC features call (DistributedOptimizer's); init_rpc calls
// it, once, before the registry closes.
void register_builtin_functions();

// The RpcError kind of a failed response status.
RpcErrorKind kind_of(ResponseStatus status);

// Every ctitan RRef has the one type PyObject, as PyTorch's Python-function RRefs do: upstream
// asserts that a fork's type equals its owner's, and sends a PyObject RRef's fetch to the
// callback's overridable processPythonRRefFetchCall, where ctitan's codec encodes the value.
inline c10::TypePtr rref_type() { return c10::PyObjectType::get(); }

// What a remote() keeps as its owner RRef's error when the function failed (unknown, bad
// arguments, threw): the status and the finished one-line message that to_here() and
// local_value() then throw as an RpcError, wherever they run.
class RemoteValueError : public std::runtime_error {
 public:
  RemoteValueError(ResponseStatus status, const std::string& line) : std::runtime_error(line), status_(status) {}
  ResponseStatus status() const { return status_; }

 private:
  ResponseStatus status_;
};

}  // namespace ctitan::rpc::detail
