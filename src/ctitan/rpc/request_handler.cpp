#include "ctitan/rpc/request_handler.h"

#include <torch/csrc/distributed/autograd/rpc_messages/rpc_with_autograd.h>
#include <torch/csrc/distributed/rpc/python_call.h>
#include <torch/csrc/distributed/rpc/python_resp.h>
#include <torch/csrc/distributed/rpc/request_callback_no_python.h>

#include "ctitan/common/error.h"
#include "ctitan/rpc/errors.h"
#include "ctitan/rpc/registry.h"
#include "ctitan/rpc/wire.h"

namespace ctitan::rpc {

namespace {

namespace tdr = torch::distributed::rpc;

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// A PYTHON_CALL decoded by deserializePythonRpcCommand, on the agent's pool thread, before
// upstream's processRpc hands it to processPythonCall. A payload that does not decode is kept as
// `error` and answered with status BadArguments.
struct DecodedCall : tdr::RpcCommandBase {
  Request request;
  std::string error;
  c10::intrusive_ptr<tdr::Message> toMessageImpl() && override {
    throw std::logic_error("rpc: a decoded call is never sent again");
  }
};

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
    if (call == nullptr) return reply(error(ResponseStatus::BadArguments, "the call did not decode"));
    if (!call->error.empty()) return reply(error(ResponseStatus::BadArguments, call->error));
    const Handler* handler = find_function(call->request.function);
    if (handler == nullptr) return reply(error(ResponseStatus::UnknownFunction, call->request.function));
    c10::IValue result;
    try {
      result = (*handler)(call->request.args);
    } catch (const ArgumentError& e) {
      return reply(error(ResponseStatus::BadArguments, e.what()));
    } catch (const std::exception& e) {
      return reply(error(ResponseStatus::Exception, first_line(e.what())));
    } catch (...) {
      return reply(error(ResponseStatus::Exception, "an exception that is not a std::exception"));
    }
    if (!result.isFuture()) return reply(ok(std::move(result)));
    // An asynchronous function: reply when its future completes, on whichever thread completes it.
    auto replied = c10::make_intrusive<tdr::JitFuture>(c10::getCustomClassType<c10::intrusive_ptr<tdr::Message>>());
    result.toFuture()->addCallback([replied, self = self_name_](tdr::JitFuture& done) {
      Response r = done.hasError()
                       ? Response{ResponseStatus::Exception, {}, self, first_line(done.tryRetrieveErrorMessage())}
                       : Response{ResponseStatus::Ok, done.value(), self, ""};
      auto message = to_message(std::move(r), self);
      auto storages = message->getStorages();
      replied->markCompleted(c10::IValue(std::move(message)), std::move(storages));
    });
    return replied;
  }

  // Upstream's version dereferences the RRef that delForkOfOwner returns, which is null while
  // other forks of it remain: a user deleting its RRef while a third worker holds a fork would
  // crash the owner. The value needs no special release here (no Python objects), so: nothing.
  void handleRRefDelete(c10::intrusive_ptr<tdr::RRef>&) const override {}

 private:
  std::unique_ptr<tdr::RpcCommandBase> decode(tdr::RpcCommandBase& rpc, tdr::MessageType type) const {
    if (type == tdr::MessageType::PYTHON_CALL) {
      const auto& obj = static_cast<tdr::PythonCall&>(rpc).serializedPyObj();
      auto call = std::make_unique<DecodedCall>();
      try {
        call->request = decode_request(obj.payload_, obj.tensors_, "the caller");
        if (call->request.kind != RequestKind::Call) call->error = "a remote() request sent as a plain call";
      } catch (const InputError& e) {
        call->error = e.what();
      }
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

  Response ok(c10::IValue value) const { return Response{ResponseStatus::Ok, std::move(value), self_name_, ""}; }
  Response error(ResponseStatus status, std::string message) const {
    return Response{status, {}, self_name_, std::move(message)};
  }

  // A result the codec cannot carry becomes status NotEncodable, so the caller still gets one line.
  static c10::intrusive_ptr<tdr::Message> to_message(Response response, const std::string& self) {
    std::vector<at::Tensor> tensors;
    std::string bytes;
    try {
      bytes = encode_response(response, tensors);
    } catch (const std::exception& e) {
      tensors.clear();
      bytes = encode_response(Response{ResponseStatus::NotEncodable, {}, self, first_line(e.what())}, tensors);
    }
    return tdr::PythonResp(tdr::SerializedPyObj(std::move(bytes), std::move(tensors))).toMessage();
  }

  c10::intrusive_ptr<tdr::JitFuture> reply(Response response) const {
    return asFuture(to_message(std::move(response), self_name_));
  }

  std::string self_name_;
};

}  // namespace

std::unique_ptr<torch::distributed::rpc::RequestCallback> make_request_handler(const std::string& self_name) {
  return std::make_unique<RequestHandler>(self_name);
}

}  // namespace ctitan::rpc
