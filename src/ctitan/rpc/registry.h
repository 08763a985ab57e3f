#pragma once
// The functions a worker offers to its peers, by name. Every worker runs the same binary, so every
// registry holds the same names; registration must happen before init_rpc.
//
//   ctitan::rpc::register_function("add", [](const at::Tensor& x, int64_t k) { return x + k; });
//
// Arguments are converted to the parameter types (ivalue_convert.h); a mismatch is an
// ArgumentError that the caller receives as RpcError BadArguments. A function returning
// rpc::Future is asynchronous: the reply is sent when that future completes.
#include <ATen/core/ivalue.h>
#include <fmt/format.h>

#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ctitan/rpc/errors.h"
#include "ctitan/rpc/future.h"
#include "ctitan/rpc/ivalue_convert.h"

namespace ctitan::rpc {

// Runs the function on decoded arguments. Returns its result, or a c10 future of it for an
// asynchronous function.
using Handler = std::function<c10::IValue(const std::vector<c10::IValue>& args)>;

// Throws InputError for an invalid name, std::logic_error for a name registered twice or a
// registration after init_rpc.
void register_handler(const std::string& name, Handler handler);

// nullptr when no function of that name is registered.
const Handler* find_function(const std::string& name);

// Sorted names, and a short fingerprint of them that workers compare at init_rpc.
std::vector<std::string> registered_names();
std::string registry_fingerprint();

// Called by init_rpc: later registrations are refused.
void freeze_registry();

namespace detail {

template <typename R, typename... A, size_t... I>
c10::IValue invoke(const std::function<R(A...)>& f, const std::vector<c10::IValue>& args,
                   std::index_sequence<I...>) {
  // Braces: converted left to right, so the first bad argument is the one named.
  std::tuple<Plain<A>...> converted{from_ivalue<Plain<A>>(args[I], fmt::format("argument {}", I + 1))...};
  if constexpr (std::is_void_v<R>) {
    std::apply(f, std::move(converted));
    return c10::IValue();
  } else if constexpr (std::is_same_v<Plain<R>, Future>) {
    return c10::IValue(std::apply(f, std::move(converted)).impl());
  } else {
    return to_ivalue(std::apply(f, std::move(converted)));
  }
}

template <typename R, typename... A>
Handler make_handler(std::function<R(A...)> f) {
  return [f = std::move(f)](const std::vector<c10::IValue>& args) -> c10::IValue {
    if (args.size() != sizeof...(A)) {
      throw ArgumentError(fmt::format("expected {} argument{}, got {}", sizeof...(A), sizeof...(A) == 1 ? "" : "s",
                                      args.size()));
    }
    return invoke(f, args, std::index_sequence_for<A...>{});
  };
}

}  // namespace detail

// `f`: a function pointer or a non-generic lambda / functor.
template <typename F>
void register_function(const std::string& name, F f) {
  register_handler(name, detail::make_handler(std::function{std::move(f)}));
}

}  // namespace ctitan::rpc

// Registers at program start, at namespace scope: CTITAN_RPC_FUNCTION("add", add); the function
// may be a lambda (commas in it are fine). In a static library, the object file must be linked in
// for the registration to run.
#define CTITAN_RPC_CONCAT_(a, b) a##b
#define CTITAN_RPC_CONCAT(a, b) CTITAN_RPC_CONCAT_(a, b)
#define CTITAN_RPC_FUNCTION(name, ...)                                                 \
  static const bool CTITAN_RPC_CONCAT(ctitan_rpc_registered_, __COUNTER__) = [] {      \
    ::ctitan::rpc::register_function(name, __VA_ARGS__);                               \
    return true;                                                                       \
  }()
