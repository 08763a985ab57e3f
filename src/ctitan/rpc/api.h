#pragma once
// Calling a registered function on a worker:
//
//   auto fut = ctitan::rpc::rpc_async("worker1", "add", torch::ones({2}), 3);
//   at::Tensor y = fut.value_as<at::Tensor>();
//   auto z = ctitan::rpc::rpc_sync("worker1", "add", x, 1, ctitan::rpc::CallOptions{.timeout_seconds = 5});
//   ctitan::rpc::RRef r = ctitan::rpc::remote("worker1", "add", x, 1);  // the result stays on worker1
//
// Arguments are converted with ivalue_convert.h. A CallOptions among them (last, by convention)
// is not an argument but the call's options. Failures are RpcError (errors.h); a value that
// cannot be encoded, an unknown worker or an invalid function name is an InputError at the call.
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ctitan/rpc/agent.h"
#include "ctitan/rpc/errors.h"
#include "ctitan/rpc/future.h"
#include "ctitan/rpc/ivalue_convert.h"
#include "ctitan/rpc/rref.h"

namespace ctitan::rpc {

struct CallOptions {
  // This call's timeout; unset = RpcOptions::timeout_seconds; 0 = none. A call that times out
  // keeps running on the callee (there is no cancellation); its late reply is dropped.
  std::optional<double> timeout_seconds;
};

// The untyped calls that rpc_async and remote wrap (defined in agent.cpp and rref.cpp).
Future call_function(const std::string& to, const std::string& function, std::vector<c10::IValue> args,
                     const CallOptions& options);
RRef remote_function(const std::string& to, const std::string& function, std::vector<c10::IValue> args,
                     const CallOptions& options);

namespace detail {

// The arguments as IValues; a CallOptions among them goes to `options` instead.
template <typename... Args>
std::vector<c10::IValue> pack_arguments(CallOptions& options, Args&&... args) {
  std::vector<c10::IValue> values;
  values.reserve(sizeof...(Args));
  auto add = [&](auto&& arg) {
    if constexpr (std::is_same_v<Plain<decltype(arg)>, CallOptions>) {
      options = arg;
    } else {
      values.push_back(to_ivalue(std::forward<decltype(arg)>(arg)));
    }
  };
  (add(std::forward<Args>(args)), ...);
  (void)add;  // no arguments
  return values;
}

}  // namespace detail

template <typename... Args>
Future rpc_async(const std::string& to, const std::string& function, Args&&... args) {
  CallOptions options;
  auto values = detail::pack_arguments(options, std::forward<Args>(args)...);
  return call_function(to, function, std::move(values), options);
}

// Runs `function` on `to` and leaves its result there, as the value of the returned RRef (the
// owner is `to`). Returns at once; a failure of the function surfaces at the RRef's to_here().
// The timeout (CallOptions) bounds the creation on the owner.
template <typename... Args>
RRef remote(const std::string& to, const std::string& function, Args&&... args) {
  CallOptions options;
  auto values = detail::pack_arguments(options, std::forward<Args>(args)...);
  return remote_function(to, function, std::move(values), options);
}

// rpc_async(...).wait(): the result as an IValue.
template <typename... Args>
c10::IValue rpc_sync(const std::string& to, const std::string& function, Args&&... args) {
  return rpc_async(to, function, std::forward<Args>(args)...).wait();
}

}  // namespace ctitan::rpc
