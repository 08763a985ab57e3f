// Making calls: rpc_async's untyped core, and how a reply becomes a value or an RpcError.
#include <fmt/format.h>
#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/autograd/utils.h>
#include <torch/csrc/distributed/rpc/python_call.h>
#include <torch/csrc/distributed/rpc/python_resp.h>
#include <torch/csrc/distributed/rpc/tensorpipe_agent.h>
#include <torch/csrc/distributed/rpc/utils.h>

#include "ctitan/common/error.h"
#include "ctitan/common/message_text.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/detail.h"
#include "ctitan/rpc/rref_codec.h"
#include "ctitan/rpc/wire.h"

namespace ctitan::rpc {

namespace {

namespace tdr = torch::distributed::rpc;
namespace tda = torch::distributed::autograd;

// The reply of a call as its value, or the RpcError it stands for.
c10::IValue decode_reply(tdr::JitFuture& reply, const std::string& to, const std::string& fn, double timeout) {
  if (reply.hasError()) detail::throw_transport_failure(reply, to, fn, timeout);
  Response response;
  try {
    auto msg = reply.value().toCustomClass<tdr::Message>();
    tdr::MessageType type = msg->type();
    // Unwraps an autograd reply (attaching RecvRpcBackward to its tensors) down to the PYTHON_RET.
    auto command = tdr::deserializeResponse(*msg, type);
    if (type != tdr::MessageType::PYTHON_RET) {
      throw InputError(fmt::format("rpc payload from {}: a reply of message type {}, expected PYTHON_RET", to,
                                   int(type)));
    }
    const auto& obj = static_cast<tdr::PythonResp&>(*command).serializedPyObj();
    response = decode_response(obj.payload_, obj.tensors_, to, rref_protocol());
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(fmt::format("rpc payload from {}: {}", to, first_line(e.what())));
  }
  const std::string what = first_line(response.message);
  switch (response.status) {
    case ResponseStatus::Ok:
      return response.value;
    case ResponseStatus::Exception:
      throw RpcError(RpcErrorKind::Remote, message::remote(to, fn, what));
    case ResponseStatus::UnknownFunction:
      throw RpcError(RpcErrorKind::UnknownFunction, message::unknown_function(to, fn));
    case ResponseStatus::BadArguments:
      throw RpcError(RpcErrorKind::BadArguments, message::bad_arguments(to, fn, what));
    case ResponseStatus::NotEncodable:
      throw RpcError(RpcErrorKind::Remote, message::remote(to, fn, "its result cannot be sent back: " + what));
  }
  throw std::logic_error("rpc: unhandled response status");
}

}  // namespace

namespace detail {

double call_timeout(const std::optional<double>& requested, double default_timeout, const std::string& to,
                    const std::string& function) {
  if (requested && !(*requested >= 0)) {
    throw InputError(fmt::format("rpc to {} '{}': timeout_seconds must be >= 0 (got {:g})", to, function, *requested));
  }
  return requested.value_or(default_timeout);
}

void throw_transport_failure(const c10::ivalue::Future& reply, const std::string& to, const std::string& function,
                             double timeout) {
  if (tdr::getRPCErrorType(reply) == tdr::RPCErrorType::TIMEOUT) {
    throw RpcError(RpcErrorKind::Timeout, message::timeout(to, function, timeout));
  }
  throw RpcError(RpcErrorKind::PeerLost, message::peer_lost(to, function, first_line(reply.tryRetrieveErrorMessage())));
}

RpcErrorKind kind_of(ResponseStatus status) {
  switch (status) {
    case ResponseStatus::UnknownFunction: return RpcErrorKind::UnknownFunction;
    case ResponseStatus::BadArguments: return RpcErrorKind::BadArguments;
    default: return RpcErrorKind::Remote;
  }
}

}  // namespace detail

Future call_function(const std::string& to, const std::string& function, std::vector<c10::IValue> args,
                     const CallOptions& options) {
  double default_timeout = 0;
  auto agent = detail::running_agent(function, &default_timeout);
  validate_function_name(function);
  const double timeout = detail::call_timeout(options.timeout_seconds, default_timeout, to, function);
  const auto& dst = detail::find_worker(*agent, to);
  std::vector<at::Tensor> tensors;
  const Request request{RequestKind::Call, function, std::move(args)};
  auto bytes = encode_forking([&](const RRefCodecHook& hook) {
    tensors.clear();
    return encode_request(request, tensors, hook);
  });
  auto message = tdr::PythonCall(tdr::SerializedPyObj(std::move(bytes), std::move(tensors)), false).toMessage();
  // Inside a distributed autograd context the call is always recorded: a result may require grad
  // when no argument does (PyTorch does the same for every Python function).
  const bool in_context = tda::DistAutogradContainer::getInstance().hasValidContext();
  c10::intrusive_ptr<tdr::JitFuture> reply;
  try {
    reply = tda::sendMessageWithAutograd(*agent, dst, std::move(message), in_context,
                                         options.timeout_seconds ? float(*options.timeout_seconds)
                                                                 : tdr::kUnsetRpcTimeout);
  } catch (const std::exception& e) {
    throw RpcError(RpcErrorKind::PeerLost, message::peer_lost(to, function, first_line(e.what())));
  }
  Future result;
  reply->addCallback([result, to, function, timeout](tdr::JitFuture& done) {
    try {
      result.set_value(decode_reply(done, to, function, timeout));
    } catch (...) {
      result.set_error(std::current_exception());
    }
  });
  return result;
}

}  // namespace ctitan::rpc
