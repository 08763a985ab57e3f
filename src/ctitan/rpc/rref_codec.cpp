#include "ctitan/rpc/rref_codec.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/rpc/rref_context.h>
#include <torch/csrc/distributed/rpc/rref_impl.h>

#include <stdexcept>

#include "ctitan/common/error.h"
#include "ctitan/common/message_text.h"
#include "ctitan/rpc/detail.h"

namespace ctitan::rpc {

namespace {

namespace tdr = torch::distributed::rpc;

class ForkProtocol final : public RRefCodecHook {
 public:
  RRefFields encode(const c10::IValue& value) const override {
    auto rref = c10::static_intrusive_pointer_cast<tdr::RRef>(value.toRRef());
    try {
      // A user parent keeps its RRef alive as a pending child until the child is accepted; an
      // owner parent registers the fork at once.
      auto fork = tdr::RRefContext::getInstance().prepareChildFork(rref);
      return RRefFields{fork.ownerId_,          fork.rrefId_.createdOn_, fork.rrefId_.localId_,
                        fork.forkId_.createdOn_, fork.forkId_.localId_,  fork.parent_};
    } catch (const c10::Error& e) {
      throw InputError("rpc: an RRef cannot be sent: " + first_line(e.what_without_backtrace()));
    }
  }

  c10::IValue decode(const RRefFields& f, const std::string& source) const override {
    auto& ctx = tdr::RRefContext::getInstance();
    // Worker ids index the agent's table: reject unknown ones here rather than in a callback later.
    for (int16_t id : {f.owner, f.parent}) {
      try {
        ctx.agent()->getWorkerInfo(id);
      } catch (const c10::Error&) {
        throw InputError(fmt::format("rpc payload from {}: an RRef names worker id {}, which does not exist", source,
                                     id));
      }
    }
    tdr::RRefForkData fork(f.owner, tdr::RRefId(f.rref_on, f.rref_local), tdr::ForkId(f.fork_on, f.fork_local),
                           f.parent, detail::rref_type()->annotation_str());
    try {
      auto rref = ctx.getOrCreateRRef(fork, detail::rref_type());
      // The child tells the owner, and then the parent, that it exists; until then the parent
      // holds its own reference, so the owner cannot free the value in between.
      ctx.notifyOwnerAndParentOfFork(fork.forkId_, fork.parent_, rref);
      return c10::IValue(c10::static_intrusive_pointer_cast<c10::RRefInterface>(rref));
    } catch (const c10::Error& e) {
      throw InputError(fmt::format("rpc payload from {}: its RRef is not valid here: {}", source,
                                   first_line(e.what_without_backtrace())));
    }
  }
};

}  // namespace

const RRefCodecHook& rref_protocol() {
  static const ForkProtocol hook;
  return hook;
}

c10::IValue CountRRefs::decode(const RRefFields&, const std::string&) const {
  throw std::logic_error("rpc: CountRRefs only encodes");
}

}  // namespace ctitan::rpc
