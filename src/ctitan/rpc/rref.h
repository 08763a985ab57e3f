#pragma once
// RRef: a reference to a value that lives on one worker, its owner (PyTorch's RRef).
//
//   rpc::RRef r = rpc::remote("worker1", "make_table", 1000);  // the value is built on worker1
//   at::Tensor t = r.to_here_as<at::Tensor>();                  // a copy, here
//   rpc::rpc_sync("worker2", "use_table", r);                   // worker2 gets its own reference
//
// The owner keeps the value while any reference to it exists on any worker, including references
// passed on to third workers (forks): upstream's RRef protocol counts them. An RRef is a value like
// any other argument or result (a registered function may take or return rpc::RRef). Dropping the
// last handle on a user tells the owner. Handles are cheap to copy; all copies are one reference.
#include <ATen/core/ivalue.h>
#include <ATen/core/rref_interface.h>

#include <optional>
#include <string>

#include "ctitan/rpc/agent.h"
#include "ctitan/rpc/ivalue_convert.h"

namespace ctitan::rpc {

class RRef {
 public:
  RRef() = default;  // empty: only valid() may be called
  explicit RRef(c10::intrusive_ptr<c10::RRefInterface> impl) : impl_(std::move(impl)) {}

  // An RRef owned by this worker that holds `value` (PyTorch's `RRef(obj)`), e.g. to hand a local
  // value to functions that take RRefs.
  static RRef local(c10::IValue value);

  bool valid() const { return impl_.defined(); }
  WorkerInfo owner() const;  // needs RPC running
  bool is_owner() const;
  // A user RRef is confirmed once the owner knows of it; an owner's is always.
  bool confirmed_by_owner() const;

  // A copy of the value. On a user it is fetched from the owner (timeout: unset = the default,
  // 0 = none); on the owner it is the value itself. If the remote() that made it failed, this
  // throws that failure (RpcError Remote, UnknownFunction or BadArguments).
  c10::IValue to_here(std::optional<double> timeout_seconds = std::nullopt) const;
  template <typename T>
  T to_here_as(std::optional<double> timeout_seconds = std::nullopt) const {
    return from_ivalue<T>(to_here(timeout_seconds), "rref value");
  }

  // The value itself, on the owner only (waits until remote() has produced it). On a user it is an
  // InputError: the value is not here; use to_here().
  c10::IValue local_value() const;

  // The C++ object an owner RRef holds: a value made with c10::IValue::make_capsule(object) of a
  // torch::CustomClassHolder subclass (by RRef::local, or returned by a remote() function). Such
  // objects never leave their owner (to_here() of one fails). InputError if the value is another
  // kind or another class.
  template <typename T>
  c10::intrusive_ptr<T> local_object() const {
    c10::IValue value = local_value();
    c10::intrusive_ptr<T> object;
    // Cast the raw pointer and take a new reference only on success: c10's
    // dynamic_intrusive_pointer_cast releases its argument and, when the cast fails, never gives
    // that reference back (LeakSanitizer found the object leaked by a wrong-class call).
    if (value.isCapsule()) {
      auto capsule = value.toCapsule();
      if (auto* raw = dynamic_cast<T*>(capsule.get())) object = c10::intrusive_ptr<T>::reclaim_copy(raw);
    }
    if (!object) not_an_object(value);
    return object;
  }

  const c10::intrusive_ptr<c10::RRefInterface>& impl() const { return impl_; }

 private:
  void require_valid(const char* what) const;
  [[noreturn]] static void not_an_object(const c10::IValue& value);
  c10::intrusive_ptr<c10::RRefInterface> impl_;
};

template <>
struct Convert<RRef> {
  static std::string type_name() { return "RRef"; }
  static bool matches(const c10::IValue& v) { return v.isRRef(); }
  static RRef from(const c10::IValue& v) { return RRef(v.toRRef()); }
  static c10::IValue to(RRef v) { return c10::IValue(v.impl()); }
};

// The leak counters of upstream's RRef context on this worker (docs/design/rpc.md, decision 15):
// OwnerRRefs held for users, forks known to the owner, user RRefs not yet confirmed, and RRef
// protocol messages in flight. While RPC runs: now. After shutdown: as they were when the agent
// stopped, which a clean program has at zero on every worker.
struct RRefCounts {
  int64_t owner_rrefs = 0;
  int64_t forks = 0;
  int64_t pending_users = 0;
  int64_t pending_futures = 0;
  bool all_zero() const { return owner_rrefs == 0 && forks == 0 && pending_users == 0 && pending_futures == 0; }
  std::string describe() const;
};
RRefCounts rref_counts();

}  // namespace ctitan::rpc
