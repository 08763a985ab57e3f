#include "ctitan/rpc/future.h"

namespace ctitan::rpc {

Future::Future() : impl_(c10::make_intrusive<c10::ivalue::Future>(c10::AnyType::get())) {}

c10::IValue Future::wait() const {
  impl_->wait();
  if (impl_->hasError()) std::rethrow_exception(impl_->exception_ptr());
  return impl_->value();
}

bool Future::completed() const { return impl_->completed(); }

void Future::set_value(c10::IValue value) const { impl_->markCompleted(std::move(value)); }

void Future::set_error(std::exception_ptr error) const { impl_->setError(std::move(error)); }

Future Future::then_impl(std::function<c10::IValue(const Future&)> f) const {
  Future next;
  // c10's then() would skip the callback on error; ours passes every outcome to f, which sees the
  // error through wait().
  impl_->addCallback([next, f = std::move(f)](c10::ivalue::Future& done) {
    try {
      c10::IValue out = f(Future(c10::intrusive_ptr<c10::ivalue::Future>::reclaim_copy(&done)));
      if (out.isFuture()) {
        auto inner = out.toFuture();
        inner->addCallback([next](c10::ivalue::Future& result) {
          if (result.hasError()) {
            next.set_error(result.exception_ptr());
          } else {
            next.set_value(result.value());
          }
        });
      } else {
        next.set_value(std::move(out));
      }
    } catch (...) {
      next.set_error(std::current_exception());
    }
  });
  return next;
}

}  // namespace ctitan::rpc
