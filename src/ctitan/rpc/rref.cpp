#include "ctitan/rpc/rref.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/autograd/utils.h>
#include <torch/csrc/distributed/rpc/python_remote_call.h>
#include <torch/csrc/distributed/rpc/rref_context.h>
#include <torch/csrc/distributed/rpc/rref_impl.h>
#include <torch/csrc/distributed/rpc/rref_proto.h>
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

// The function name that errors of to_here() carry.
constexpr const char* kFetch = "to_here";

tdr::RRef& upstream(const c10::intrusive_ptr<c10::RRefInterface>& impl) { return static_cast<tdr::RRef&>(*impl); }

// On the owner: the value, or the failure remote() stored for it, as an RpcError.
c10::IValue owner_value(tdr::OwnerRRef& owner) {
  try {
    return owner.getValue();
  } catch (const detail::RemoteValueError& e) {
    throw RpcError(detail::kind_of(e.status()), e.what());
  }
}

// A user's remote() reply: confirms the user to upstream's context. Upstream's own error path
// (RRef::handleError) throws on this agent thread and would leave the user pending forever, which
// makes shutdown wait; a failed creation is kept on the RRef (getOwnerCreationFuture) instead.
void finish_user_creation(tdr::JitFuture& reply, const tdr::ForkId& fork) {
  if (!reply.hasError()) {
    try {
      tdr::callback::confirmPendingUser(reply, fork);
      return;
    } catch (const std::exception&) {
    }
  }
  try {
    tdr::RRefContext::getInstance().delPendingUser(fork);
  } catch (const std::exception&) {
  }
}

// A remote() to self: the owner drops the fork it added for the call's duration.
void finish_self_creation(tdr::JitFuture& reply, const tdr::RRefId& id) {
  try {
    if (!reply.hasError()) {
      tdr::callback::finishCreatingOwnerRRef(reply, id);
      return;
    }
  } catch (const std::exception&) {
  }
  try {
    tdr::RRefContext::getInstance().delForkOfOwner(id, id);
  } catch (const std::exception&) {
  }
}

// A user's to_here(): PYTHON_RREF_FETCH_CALL, which the owner's request handler answers with the
// value encoded by ctitan's codec (a Response, inside PythonRRefFetchRet's values).
c10::IValue fetch(const tdr::UserRRef& user, const std::optional<double>& timeout_seconds) {
  double default_timeout = 0;
  auto agent = detail::running_agent(kFetch, &default_timeout);
  const auto& owner = agent->getWorkerInfo(user.owner());
  const double timeout = detail::call_timeout(timeout_seconds, default_timeout, owner.name_, kFetch);
  // A remote() that never reached its owner leaves nothing there to fetch.
  if (auto creation = user.getOwnerCreationFuture(); creation && creation->completed() && creation->hasError()) {
    detail::throw_transport_failure(*creation, owner.name_, "remote", default_timeout);
  }
  auto& ctx = tdr::RRefContext::getInstance();
  auto message = tdr::PythonRRefFetchCall(ctx.getWorkerId(), user.rrefId()).toMessage();
  // Recorded inside a distributed autograd context, as upstream's toHere does: the value may
  // require grad.
  c10::intrusive_ptr<tdr::JitFuture> reply;
  try {
    reply = tda::sendMessageWithAutograd(*agent, owner, std::move(message), /*forceGradRecording=*/true,
                                         timeout_seconds ? float(*timeout_seconds) : tdr::kUnsetRpcTimeout);
  } catch (const std::exception& e) {
    throw RpcError(RpcErrorKind::PeerLost, message::peer_lost(owner.name_, kFetch, first_line(e.what())));
  }
  reply->wait();
  if (reply->hasError()) detail::throw_transport_failure(*reply, owner.name_, kFetch, timeout);
  Response response;
  try {
    auto msg = reply->value().toCustomClass<tdr::Message>();
    tdr::MessageType type = msg->type();
    auto command = tdr::deserializeResponse(*msg, type);
    if (type != tdr::MessageType::PYTHON_RREF_FETCH_RET) {
      throw InputError(fmt::format("rpc payload from {}: a to_here reply of message type {}", owner.name_, int(type)));
    }
    auto obj = tdr::SerializedPyObj::fromIValues(static_cast<tdr::RRefFetchRet&>(*command).values());
    response = decode_response(obj.payload_, obj.tensors_, owner.name_, rref_protocol());
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(fmt::format("rpc payload from {}: {}", owner.name_, first_line(e.what())));
  }
  // The owner sends a failure as the finished line (it knows the function remote() ran).
  if (response.status != ResponseStatus::Ok) throw RpcError(detail::kind_of(response.status), response.message);
  return response.value;
}

}  // namespace

RRef RRef::local(c10::IValue value) {
  detail::running_agent("RRef::local", nullptr);
  auto owner = tdr::RRefContext::getInstance().createOwnerRRef(detail::rref_type());
  owner->setValue(std::move(value));
  return RRef(c10::static_intrusive_pointer_cast<c10::RRefInterface>(owner));
}

void RRef::require_valid(const char* what) const {
  if (!valid()) throw std::logic_error(fmt::format("rpc: RRef::{}() on an empty RRef", what));
}

WorkerInfo RRef::owner() const {
  require_valid("owner");
  auto agent = detail::running_agent("RRef::owner", nullptr);
  const auto& info = static_cast<const tdr::RpcAgent&>(*agent).getWorkerInfo(impl_->owner());
  return WorkerInfo{info.name_, info.id_};
}

bool RRef::is_owner() const {
  require_valid("is_owner");
  return impl_->isOwner();
}

bool RRef::confirmed_by_owner() const {
  require_valid("confirmed_by_owner");
  return impl_->confirmedByOwner();
}

c10::IValue RRef::to_here(std::optional<double> timeout_seconds) const {
  require_valid("to_here");
  if (impl_->isOwner()) return owner_value(static_cast<tdr::OwnerRRef&>(upstream(impl_)));
  return fetch(static_cast<const tdr::UserRRef&>(upstream(impl_)), timeout_seconds);
}

c10::IValue RRef::local_value() const {
  require_valid("local_value");
  if (!impl_->isOwner()) {
    throw InputError(fmt::format("rpc: local_value() on a user RRef of {}: the value lives on its owner; use "
                                 "to_here() for a copy",
                                 owner().name));
  }
  return owner_value(static_cast<tdr::OwnerRRef&>(upstream(impl_)));
}

void RRef::not_an_object(const c10::IValue& value) {
  throw InputError(fmt::format("rpc: local_object() of an RRef whose value is {}, not the C++ object asked for",
                               value_type_name(value)));
}

RRef remote_function(const std::string& to, const std::string& function, std::vector<c10::IValue> args,
                     const CallOptions& options) {
  double default_timeout = 0;
  auto agent = detail::running_agent(function, &default_timeout);
  validate_function_name(function);
  detail::call_timeout(options.timeout_seconds, default_timeout, to, function);
  const auto& dst = detail::find_worker(*agent, to);
  std::vector<at::Tensor> tensors;
  const Request request{RequestKind::Remote, function, std::move(args)};
  auto bytes = encode_forking([&](const RRefCodecHook& hook) {
    tensors.clear();
    return encode_request(request, tensors, hook);
  });
  tdr::SerializedPyObj payload(std::move(bytes), std::move(tensors));
  const float timeout = options.timeout_seconds ? float(*options.timeout_seconds) : tdr::kUnsetRpcTimeout;
  const bool in_context = tda::DistAutogradContainer::getInstance().hasValidContext();
  auto& ctx = tdr::RRefContext::getInstance();
  auto send = [&](const tdr::RRefId& rref_id, const tdr::ForkId& fork_id) {
    auto message = tdr::PythonRemoteCall(std::move(payload), rref_id.toIValue(), fork_id.toIValue(), false).toMessage();
    try {
      return tda::sendMessageWithAutograd(*agent, dst, std::move(message), in_context, timeout);
    } catch (const std::exception& e) {
      throw RpcError(RpcErrorKind::PeerLost, message::peer_lost(to, function, first_line(e.what())));
    }
  };
  if (dst.id_ == ctx.getWorkerId()) {
    // To self (upstream's rule): the owner exists before the call, with the RRef id as a fork that
    // keeps it alive until the call has stored the value.
    auto owner = ctx.createOwnerRRef(detail::rref_type());
    ctx.addSelfAsFork(owner);
    auto reply = send(owner->rrefId(), owner->rrefId());
    owner->registerOwnerCreationFuture(reply);
    reply->addCallback([id = owner->rrefId()](tdr::JitFuture& done) { finish_self_creation(done, id); });
    return RRef(c10::static_intrusive_pointer_cast<c10::RRefInterface>(owner));
  }
  auto user = ctx.createUserRRef(dst.id_, detail::rref_type());
  // Pending until the owner's reply: the user cannot be deleted before the owner knows of it.
  ctx.addPendingUser(user->forkId(), user);
  c10::intrusive_ptr<tdr::JitFuture> reply;
  try {
    reply = send(user->rrefId(), user->forkId());
  } catch (...) {
    ctx.delPendingUser(user->forkId());
    throw;
  }
  user->registerOwnerCreationFuture(reply);
  reply->addCallback([fork = user->forkId()](tdr::JitFuture& done) { finish_user_creation(done, fork); });
  return RRef(c10::static_intrusive_pointer_cast<c10::RRefInterface>(user));
}

}  // namespace ctitan::rpc
