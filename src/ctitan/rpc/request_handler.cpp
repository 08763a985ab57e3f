#include "ctitan/rpc/request_handler.h"

#include <torch/csrc/distributed/autograd/rpc_messages/rpc_with_autograd.h>
#include <torch/csrc/distributed/rpc/python_call.h>
#include <torch/csrc/distributed/rpc/python_remote_call.h>
#include <torch/csrc/distributed/rpc/python_resp.h>
#include <torch/csrc/distributed/rpc/request_callback_no_python.h>
#include <torch/csrc/distributed/rpc/rref_context.h>
#include <torch/csrc/distributed/rpc/rref_proto.h>

#include <optional>

#include "ctitan/common/error.h"
#include "ctitan/common/message_text.h"
#include "ctitan/rpc/detail.h"
#include "ctitan/rpc/errors.h"
#include "ctitan/rpc/registry.h"
#include "ctitan/rpc/rref_codec.h"
#include "ctitan/rpc/wire.h"

namespace ctitan::rpc {

namespace {

namespace tdr = torch::distributed::rpc;

// A PYTHON_CALL or PYTHON_REMOTE_CALL decoded by deserializePythonRpcCommand, on the agent's pool
// thread, before upstream's processRpc hands it on. Decoding there is what makes RRefs in the
// arguments work: upstream waits until their owners confirm them before it runs the call. A
// payload that does not decode is kept as `error` and answered with status BadArguments.
struct DecodedCall : tdr::RpcCommandBase {
  Request request;
  std::string error;
  // remote() only: the ids of the RRef the result becomes.
  std::optional<tdr::RRefId> rref_id;
  std::optional<tdr::ForkId> fork_id;
  c10::intrusive_ptr<tdr::Message> toMessageImpl() && override {
    throw std::logic_error("rpc: a decoded call is never sent again");
  }
};

// How a call that did not produce a value failed: a status and one line (no worker or function).
struct CallFailure : std::runtime_error {
  CallFailure(ResponseStatus status, const std::string& what) : std::runtime_error(what), status(status) {}
  ResponseStatus status;
};

c10::intrusive_ptr<tdr::JitFuture> message_future() {
  return c10::make_intrusive<tdr::JitFuture>(c10::getCustomClassType<c10::intrusive_ptr<tdr::Message>>());
}

void complete(tdr::JitFuture& future, c10::intrusive_ptr<tdr::Message> message) {
  auto storages = message->getStorages();
  future.markCompleted(c10::IValue(std::move(message)), std::move(storages));
}

class RequestHandler : public tdr::RequestCallbackNoPython {
 public:
  explicit RequestHandler(std::string self_name) : self_name_(std::move(self_name)) {}

 protected:
  std::unique_ptr<tdr::RpcCommandBase> deserializePythonRpcCommand(std::unique_ptr<tdr::RpcCommandBase> rpc,
                                                                   const tdr::MessageType& type) const override {
    auto decoded = decode(*rpc, type);
    return decoded ? std::move(decoded) : std::move(rpc);
  }

  c10::intrusive_ptr<tdr::JitFuture> processPythonCall(tdr::RpcCommandBase& rpc,
                                                      const std::vector<c10::Stream>&) const override {
    auto* call = dynamic_cast<DecodedCall*>(&rpc);
    auto replied = message_future();
    // Runs on whichever thread completes the result: an async function's, or this one.
    run(call)->addCallback([replied, self = self_name_](tdr::JitFuture& done) {
      complete(*replied, to_message(outcome(done, self), self, Envelope::Call));
    });
    return replied;
  }

  // remote(): the result (or its failure) becomes the value of an OwnerRRef here, which
  // upstream's assignOwnerRRef creates (or finds, for a remote() to self) and registers.
  c10::intrusive_ptr<tdr::JitFuture> processPythonRemoteCall(tdr::RpcCommandBase& rpc,
                                                            const std::vector<c10::Stream>&) const override {
    auto* call = dynamic_cast<DecodedCall*>(&rpc);
    if (call == nullptr || !call->rref_id || !call->fork_id) {
      throw std::invalid_argument("rpc: a remote() request without its RRef ids");
    }
    auto value = c10::make_intrusive<tdr::JitFuture>(detail::rref_type());
    run(call)->addCallback([value, self = self_name_, function = call->request.function](tdr::JitFuture& done) {
      if (!done.hasError()) {
        value->markCompleted(done.value());
        return;
      }
      // The line the caller would have got from rpc_sync, finished here where worker and
      // function are known; to_here() and local_value() throw it.
      Response failed = outcome(done, self);
      value->setError(std::make_exception_ptr(
          detail::RemoteValueError(failed.status, failure_line(failed, self, function))));
    });
    return assignOwnerRRef(*call->rref_id, *call->fork_id, value);
  }

  // A user's to_here(): waits until the OwnerRRef exists and holds its value, then sends that value
  // with ctitan's codec (or the failure remote() stored).
  c10::intrusive_ptr<tdr::JitFuture> processPythonRRefFetchCall(tdr::RpcCommandBase& rpc) const override {
    auto& fetch = static_cast<tdr::PythonRRefFetchCall&>(rpc);
    auto replied = message_future();
    auto created = tdr::RRefContext::getInstance().getOwnerRRef(fetch.rrefId());
    created->addCallback([replied, self = self_name_](tdr::JitFuture& owner_ready) {
      if (owner_ready.hasError()) {
        complete(*replied, to_message(Response{ResponseStatus::Exception, {}, self,
                                               message::remote(self, "to_here", first_line(owner_ready.tryRetrieveErrorMessage()))},
                                      self, Envelope::Fetch));
        return;
      }
      auto owner = tdr::fromRRefInterface(owner_ready.value().toRRef());
      owner->getFuture()->addCallback([replied, self](tdr::JitFuture& value) {
        Response response{ResponseStatus::Ok, {}, self, ""};
        if (!value.hasError()) {
          response.value = value.value();
        } else {
          try {
            std::rethrow_exception(value.exception_ptr());
          } catch (const detail::RemoteValueError& e) {
            response = Response{e.status(), {}, self, e.what()};
          } catch (const std::exception& e) {
            response = Response{ResponseStatus::Exception, {}, self, message::remote(self, "to_here", first_line(e.what()))};
          }
        }
        complete(*replied, to_message(std::move(response), self, Envelope::Fetch));
      });
    });
    return replied;
  }

  // Upstream's version dereferences the RRef that delForkOfOwner returns, which is null while
  // other forks of it remain: a user deleting its RRef while a third worker holds a fork would
  // crash the owner. The value needs no special release here (no Python objects), so: nothing.
  void handleRRefDelete(c10::intrusive_ptr<tdr::RRef>&) const override {}

 private:
  enum class Envelope { Call, Fetch };

  std::unique_ptr<tdr::RpcCommandBase> decode(tdr::RpcCommandBase& rpc, tdr::MessageType type) const {
    if (type == tdr::MessageType::PYTHON_CALL) {
      return decode_payload(static_cast<tdr::PythonCall&>(rpc).serializedPyObj(), RequestKind::Call);
    }
    if (type == tdr::MessageType::PYTHON_REMOTE_CALL) {
      auto& remote = static_cast<tdr::PythonRemoteCall&>(rpc);
      auto call = decode_payload(remote.serializedPyObj(), RequestKind::Remote);
      call->rref_id.emplace(tdr::RRefId::fromIValue(remote.retRRefId()));
      call->fork_id.emplace(tdr::ForkId::fromIValue(remote.retForkId()));
      return call;
    }
    // A call inside a distributed autograd context arrives wrapped: decode the inner call and put
    // it back, as PyTorch's RequestCallbackImpl does.
    if (type == tdr::MessageType::FORWARD_AUTOGRAD_REQ) {
      auto& wrapper = static_cast<torch::distributed::autograd::RpcWithAutograd&>(rpc);
      if (auto inner = decode(wrapper.wrappedRpc(), wrapper.wrappedMessageType())) {
        wrapper.setWrappedRpc(std::move(inner));
      }
    }
    return nullptr;
  }

  static std::unique_ptr<DecodedCall> decode_payload(const tdr::SerializedPyObj& obj, RequestKind expected) {
    auto call = std::make_unique<DecodedCall>();
    try {
      call->request = decode_request(obj.payload_, obj.tensors_, "the caller", rref_protocol());
      if (call->request.kind != expected) {
        call->error = expected == RequestKind::Call ? "a remote() request sent as a plain call"
                                                    : "a plain call sent as a remote() request";
      }
    } catch (const InputError& e) {
      call->error = e.what();
    }
    return call;
  }

  // The function's result as a future: its value, an async function's own future, or an error
  // CallFailure saying how the call failed.
  static c10::intrusive_ptr<tdr::JitFuture> run(const DecodedCall* call) {
    auto failed = [](ResponseStatus status, const std::string& what) {
      auto f = c10::make_intrusive<tdr::JitFuture>(c10::AnyType::get());
      f->setError(std::make_exception_ptr(CallFailure(status, what)));
      return f;
    };
    if (call == nullptr) return failed(ResponseStatus::BadArguments, "the call did not decode");
    if (!call->error.empty()) return failed(ResponseStatus::BadArguments, call->error);
    const Handler* handler = find_function(call->request.function);
    if (handler == nullptr) return failed(ResponseStatus::UnknownFunction, call->request.function);
    c10::IValue result;
    try {
      result = (*handler)(call->request.args);
    } catch (const ArgumentError& e) {
      return failed(ResponseStatus::BadArguments, e.what());
    } catch (const std::exception& e) {
      return failed(ResponseStatus::Exception, first_line(e.what()));
    } catch (...) {
      return failed(ResponseStatus::Exception, "an exception that is not a std::exception");
    }
    if (result.isFuture()) return result.toFuture();
    auto done = c10::make_intrusive<tdr::JitFuture>(c10::AnyType::get());
    done->markCompleted(std::move(result));
    return done;
  }

  // A completed run() as the Response the caller decodes.
  static Response outcome(tdr::JitFuture& done, const std::string& self) {
    if (!done.hasError()) return Response{ResponseStatus::Ok, done.value(), self, ""};
    try {
      std::rethrow_exception(done.exception_ptr());
    } catch (const CallFailure& e) {
      return Response{e.status, {}, self, first_line(e.what())};
    } catch (const std::exception& e) {
      // An async function's future completed with an error.
      return Response{ResponseStatus::Exception, {}, self, first_line(e.what())};
    }
  }

  // The one line rpc_sync would throw for this failure (agent.cpp's decode_reply says the same).
  static std::string failure_line(const Response& failed, const std::string& self, const std::string& function) {
    switch (failed.status) {
      case ResponseStatus::UnknownFunction: return message::unknown_function(self, function);
      case ResponseStatus::BadArguments: return message::bad_arguments(self, function, failed.message);
      default: return message::remote(self, function, failed.message);
    }
  }

  // A value the codec cannot carry becomes status NotEncodable, so the caller still gets one line.
  static c10::intrusive_ptr<tdr::Message> to_message(Response response, const std::string& self, Envelope envelope) {
    std::vector<at::Tensor> tensors;
    std::string bytes;
    try {
      bytes = encode_forking([&](const RRefCodecHook& hook) {
        tensors.clear();
        return encode_response(response, tensors, hook);
      });
    } catch (const std::exception& e) {
      tensors.clear();
      const std::string why = first_line(e.what());
      // A fetch reply's failure is the finished line (see RRef::to_here); a call's is only the reason.
      Response failed = envelope == Envelope::Call
                            ? Response{ResponseStatus::NotEncodable, {}, self, why}
                            : Response{ResponseStatus::NotEncodable, {}, self,
                                       message::remote(self, "to_here", "its value cannot be sent: " + why)};
      bytes = encode_response(failed, tensors);
    }
    tdr::SerializedPyObj obj(std::move(bytes), std::move(tensors));
    if (envelope == Envelope::Fetch) return tdr::PythonRRefFetchRet(std::move(obj).toIValues()).toMessage();
    return tdr::PythonResp(std::move(obj)).toMessage();
  }

  std::string self_name_;
};

}  // namespace

std::unique_ptr<torch::distributed::rpc::RequestCallback> make_request_handler(const std::string& self_name) {
  return std::make_unique<RequestHandler>(self_name);
}

}  // namespace ctitan::rpc
