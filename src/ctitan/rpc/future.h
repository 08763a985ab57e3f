#pragma once
// rpc::Future: the result of rpc_async, and what an async function returns. It wraps a
// c10::ivalue::Future whose value is the decoded result and whose error is an RpcError (or the
// InputError of a malformed reply).
#include <ATen/core/ivalue.h>

#include <exception>
#include <functional>
#include <type_traits>
#include <utility>

#include "ctitan/rpc/ivalue_convert.h"

namespace ctitan::rpc {

class Future {
 public:
  // A pending future: an async function returns it and completes it later, from any thread, with
  // set_value or set_error; the agent replies then, and no pool thread waits meanwhile.
  Future();
  explicit Future(c10::intrusive_ptr<c10::ivalue::Future> impl) : impl_(std::move(impl)) {}

  // Blocks until completed; returns the value or rethrows the error (RpcError for failed calls).
  c10::IValue wait() const;
  template <typename T>
  T value_as() const {
    return from_ivalue<T>(wait(), "rpc result");
  }
  bool completed() const;

  void set_value(c10::IValue value) const;
  void set_error(std::exception_ptr error) const;

  // A future completed with f(*this) once this one completes, or with what f throws (f may call
  // wait() to get the value or the error). f runs on whichever thread completes this future,
  // usually an agent pool thread: it must not block. f may return a value, void, or a Future
  // (then the new future completes with that one).
  template <typename F>
  Future then(F f) const {
    return then_impl([f = std::move(f)](const Future& done) -> c10::IValue {
      using R = std::invoke_result_t<F&, const Future&>;
      if constexpr (std::is_void_v<R>) {
        f(done);
        return c10::IValue();
      } else if constexpr (std::is_same_v<Plain<R>, Future>) {
        return c10::IValue(f(done).impl());
      } else {
        return to_ivalue(f(done));
      }
    });
  }

  const c10::intrusive_ptr<c10::ivalue::Future>& impl() const { return impl_; }

 private:
  Future then_impl(std::function<c10::IValue(const Future&)> f) const;
  c10::intrusive_ptr<c10::ivalue::Future> impl_;
};

}  // namespace ctitan::rpc
