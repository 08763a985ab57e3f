// Multi-process RPC scenarios, started on every rank by
// `ctitan run --nproc-per-node N --master-port 0 --exec rpc_test_worker <scenario>`. Each worker
// checks every result itself and prints one line: "<worker>: <scenario>: N checks passed" (exit 0)
// or "... FAILED: ..." (exit 1). After every scenario but kill_peer, each worker also checks that
// calls after shutdown throw, that a second init_rpc is refused and that its RRef leak counters
// are zero.
//   calls              (2) every argument kind both ways, typed functions, self-calls, an async
//                      function, nested calls, then() chains, 64 outstanding calls
//   errors             (2) callee exception, unknown function, bad arguments, result not
//                      encodable, timeouts (a call's own, the default, 0 = none), caller-side input
//                      errors, calls before init and after shutdown, a second init_rpc
//   kill_peer          (2) lifetime_scenarios.cpp
//   shutdown_inflight  (3) lifetime_scenarios.cpp
//   rref               (3) rref_scenario.cpp
//   dist_autograd      (2) autograd_scenarios.cpp
//   dist_optim         (2) autograd_scenarios.cpp
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/distributed/dist_env.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/registry.h"
#include "ctitan/rpc/value_codec.h"
#include "rpc/scenarios.h"
#include "rpc/worker_checks.h"

namespace rpc_test {

using c10::IValue;

void register_call_functions() {
  rpc::register_function("echo", [](IValue v) { return v; });
  rpc::register_function("add", [](const at::Tensor& x, int64_t k) { return x + k; });
  rpc::register_function("concat", [](const std::string& a, const std::string& b) { return a + b; });
  rpc::register_function("sum_list", [](const std::vector<double>& xs) {
    double s = 0;
    for (double x : xs) s += x;
    return s;
  });
  rpc::register_function("count_true", [](const std::vector<bool>& xs) {
    int64_t n = 0;
    for (bool x : xs) n += x;
    return n;
  });
  rpc::register_function("scale_dict", [](const c10::Dict<std::string, at::Tensor>& d, double s) {
    c10::Dict<std::string, at::Tensor> out;
    for (const auto& e : d) out.insert(e.key(), e.value() * s);
    return out;
  });
  rpc::register_function("pair", [](int64_t k, std::optional<std::string> s) {
    return std::make_tuple(k * 2, s.value_or("none"));
  });
  rpc::register_function("nothing", [] {});
  rpc::register_function("whoami", [] { return rpc::get_worker_info().name; });
  // Asynchronous: returns at once; a thread of its own completes the result 50 ms later.
  rpc::register_function("delayed_double", [](int64_t k) {
    rpc::Future result;
    std::thread([result, k] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      result.set_value(IValue(2 * k));
    }).detach();
    return result;
  });
  // A nested call: the callee calls back into `via` while the caller waits.
  rpc::register_function("nested_add", [](const std::string& via, const at::Tensor& x) {
    return rpc::rpc_sync(via, "add", x, 1).toTensor();
  });
  rpc::register_function("fail", [] {
    throw std::runtime_error("boom from " + rpc::get_worker_info().name);
  });
  rpc::register_function("sleep", [](double seconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return seconds;
  });
  rpc::register_function("device", [] { return IValue(c10::Device(c10::kCPU)); });
}

// Values of every kind the codec carries, each echoed by `to` and compared with values_equal.
std::vector<std::pair<std::string, IValue>> echo_values() {
  auto strided = at::arange(12, at::kFloat).view({3, 4}).t();  // (4, 3), non-contiguous
  c10::Dict<std::string, at::Tensor> by_name;
  by_name.insert("w", at::ones({2, 2}));
  by_name.insert("b", at::zeros({2}, at::kDouble));
  c10::impl::GenericDict by_int(c10::IntType::get(), c10::AnyType::get());
  by_int.insert(3, IValue("three"));
  by_int.insert(-1, IValue(at::full({1}, 7, at::kLong)));
  c10::Dict<at::Tensor, at::Tensor> by_tensor;
  by_tensor.insert(at::ones({1}), at::full({1}, 8.0));
  return {
      {"None", IValue()},
      {"true", IValue(true)},
      {"false", IValue(false)},
      {"int min", IValue(std::numeric_limits<int64_t>::min())},
      {"double", IValue(-0.0)},
      {"NaN", IValue(std::nan(""))},
      {"str with NUL and UTF-8", IValue(std::string("a\0b \xc3\xa9", 6))},
      {"empty str", IValue(std::string())},
      {"strided tensor", IValue(strided)},
      {"0-d tensor", IValue(at::scalar_tensor(2.5))},
      {"bf16 tensor", IValue(at::linspace(-1, 1, 5).to(at::kBFloat16))},
      {"empty tensor", IValue(at::empty({0, 3}))},
      {"List[int]", rpc::to_ivalue(std::vector<int64_t>{1, -2, 3})},
      {"List[float]", rpc::to_ivalue(std::vector<double>{0.5, -1e300})},
      {"List[bool]", rpc::to_ivalue(std::vector<bool>{true, false})},
      {"List[str]", rpc::to_ivalue(std::vector<std::string>{"a", ""})},
      {"List[Tensor]", rpc::to_ivalue(std::vector<at::Tensor>{at::ones({2}), at::zeros({1}, at::kInt)})},
      {"empty List[int]", rpc::to_ivalue(std::vector<int64_t>{})},
      {"nested List", rpc::to_ivalue(std::vector<std::vector<int64_t>>{{1, 2}, {3}})},
      {"Tuple", rpc::to_ivalue(std::make_tuple(int64_t(1), std::string("a"), at::ones({1}), 2.0))},
      {"Dict[str, Tensor]", IValue(by_name)},
      {"Dict[int, Any]", IValue(by_int)},
      {"Dict[Tensor, Tensor]", IValue(by_tensor)},
  };
}

void run_calls(const std::string& self, const std::string& peer) {
  for (const auto& [label, value] : echo_values()) {
    for (const auto& to : {peer, self}) {
      auto back = rpc::rpc_sync(to, "echo", value);
      check(rpc::values_equal(back, value), fmt::format("echo of {} via {} came back different", label, to));
    }
  }
  // Decoded lists are typed: the conversions to std::vector work.
  auto ints = rpc::rpc_async(peer, "echo", std::vector<int64_t>{4, 5}).value_as<std::vector<int64_t>>();
  check(ints == std::vector<int64_t>{4, 5}, "echo of a List[int] as std::vector<int64_t>");

  auto sum = rpc::rpc_sync(peer, "add", at::ones({2}), 3).toTensor();
  check(at::equal(sum, at::full({2}, 4.0f)), "add(ones(2), 3) != [4, 4]");
  check(rpc::rpc_sync(peer, "concat", "ab", std::string("cd")).toStringRef() == "abcd", "concat");
  // 0.5 + 1.5 + 2 is exact in binary floating point.
  check(rpc::rpc_async(peer, "sum_list", std::vector<double>{0.5, 1.5, 2}).value_as<double>() == 4.0, "sum_list");
  check(rpc::rpc_async(peer, "count_true", std::vector<bool>{true, false, true}).value_as<int64_t>() == 2,
        "count_true");
  c10::Dict<std::string, at::Tensor> d;
  d.insert("x", at::ones({3}));
  auto scaled = rpc::rpc_async(peer, "scale_dict", d, 2.0).value_as<c10::Dict<std::string, at::Tensor>>();
  check(scaled.size() == 1 && at::equal(scaled.at("x"), at::full({3}, 2.0f)), "scale_dict");
  auto p1 = rpc::rpc_async(peer, "pair", 7, std::optional<std::string>()).value_as<std::tuple<int64_t, std::string>>();
  check(p1 == std::make_tuple(int64_t(14), std::string("none")), "pair(7, None)");
  auto p2 = rpc::rpc_async(peer, "pair", 7, std::optional<std::string>("x")).value_as<std::tuple<int64_t, std::string>>();
  check(p2 == std::make_tuple(int64_t(14), std::string("x")), "pair(7, 'x')");
  check(rpc::rpc_sync(peer, "nothing").isNone(), "a void function returns None");
  check(rpc::rpc_sync(peer, "whoami").toStringRef() == peer, "whoami on the peer");
  check(rpc::rpc_sync(self, "whoami").toStringRef() == self, "whoami on self");
  check(rpc::rpc_async(peer, "delayed_double", 21).value_as<int64_t>() == 42, "async function delayed_double(21)");
  auto nested = rpc::rpc_sync(peer, "nested_add", self, at::full({2}, 5.0f)).toTensor();
  check(at::equal(nested, at::full({2}, 6.0f)), "nested_add: peer calling back into this worker");

  // then(): each step runs when the previous completes; an error reaches the step through wait().
  auto chained = rpc::rpc_async(peer, "add", at::ones({2}), 1)
                     .then([](const rpc::Future& f) { return f.value_as<at::Tensor>() * 2; })
                     .then([](const rpc::Future& f) { return f.value_as<at::Tensor>().sum().item<double>(); })
                     .value_as<double>();
  check(chained == 8.0, fmt::format("then() chain gave {}, expected (1+1)*2*2 = 8", chained));
  auto caught = rpc::rpc_async(peer, "fail").then([](const rpc::Future& f) -> std::string {
    try {
      f.wait();
      return "no error";
    } catch (const rpc::RpcError& e) {
      return kind_name(e.kind());
    }
  });
  check(caught.value_as<std::string>() == "Remote", "then() after a failed call sees the RpcError");
  auto chained_call = rpc::rpc_async(peer, "add", at::ones({1}), 1).then([peer](const rpc::Future& f) {
    return rpc::rpc_async(peer, "add", f.value_as<at::Tensor>(), 10);
  });
  check(at::equal(chained_call.value_as<at::Tensor>(), at::full({1}, 12.0f)), "then() returning a Future");

  // 64 calls outstanding at once, to the peer and to self.
  std::vector<rpc::Future> futures;
  for (int i = 0; i < 64; ++i) futures.push_back(rpc::rpc_async(i % 4 == 0 ? self : peer, "add", at::full({1}, i), i));
  for (int i = 0; i < 64; ++i) {
    auto v = futures[i].value_as<at::Tensor>().item<float>();
    check(v == 2.0f * i, fmt::format("outstanding call {} gave {}, expected {}", i, v, 2 * i));
  }

  auto me = rpc::get_worker_info();
  check(me.name == self, "get_worker_info().name");
  check(rpc::get_worker_info(peer).name == peer, "get_worker_info(peer)");
  check(rpc::get_worker_infos().size() == 2, "get_worker_infos() size");
}

void run_errors(const std::string& self, const std::string& peer) {
  expect_rpc_error(rpc::RpcErrorKind::Remote, [&] { rpc::rpc_sync(peer, "fail"); },
                   fmt::format("rpc to {} 'fail' failed on {}: boom from {}", peer, peer, peer), "callee exception");
  expect_rpc_error(rpc::RpcErrorKind::UnknownFunction, [&] { rpc::rpc_sync(peer, "nope"); },
                   fmt::format("rpc to {}: no function 'nope' is registered there", peer), "unknown function");
  expect_rpc_error(rpc::RpcErrorKind::BadArguments, [&] { rpc::rpc_sync(peer, "add", 1, 2); },
                   fmt::format("rpc to {} 'add': argument 1 expected Tensor, got int", peer), "argument type");
  expect_rpc_error(rpc::RpcErrorKind::BadArguments, [&] { rpc::rpc_sync(peer, "add", at::ones({1}), "x"); },
                   fmt::format("rpc to {} 'add': argument 2 expected int, got str", peer), "second argument type");
  expect_rpc_error(rpc::RpcErrorKind::BadArguments, [&] { rpc::rpc_sync(peer, "add", at::ones({1})); },
                   fmt::format("rpc to {} 'add': expected 2 arguments, got 1", peer), "argument count");
  expect_rpc_error(rpc::RpcErrorKind::BadArguments,
                   [&] { rpc::rpc_sync(peer, "sum_list", std::vector<std::string>{"a"}); },
                   fmt::format("rpc to {} 'sum_list': argument 1 expected List[float], got List[str]", peer),
                   "list element type");
  expect_rpc_error(rpc::RpcErrorKind::Remote, [&] { rpc::rpc_sync(peer, "device"); },
                   fmt::format("rpc to {} 'device' failed on {}: its result cannot be sent back: rpc: value of "
                               "type Device cannot be sent (the codec carries None, bool, int, float, str, Tensor "
                               "and lists, tuples and dicts of them)",
                               peer, peer),
                   "result not encodable");

  // Timeouts. The timed-out call keeps running on the peer; shutdown waits for it.
  auto t0 = std::chrono::steady_clock::now();
  expect_rpc_error(rpc::RpcErrorKind::Timeout,
                   [&] { rpc::rpc_sync(peer, "sleep", 1.5, rpc::CallOptions{.timeout_seconds = 0.3}); },
                   fmt::format("rpc to {} 'sleep' ran for more than 0.3 s", peer), "call timeout");
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Not before the limit; the upper bound is 10x the limit (a loaded 2-core machine).
  check(elapsed >= 0.3 * 0.95 && elapsed < 3.0, fmt::format("the 0.3 s timeout fired after {:.3f} s", elapsed));
  // The default (RpcOptions 3 s) applies to a call without options; timeout 0 means none.
  auto by_default = rpc::rpc_async(peer, "sleep", 3.5);
  auto without = rpc::rpc_async(peer, "sleep", 3.5, rpc::CallOptions{.timeout_seconds = 0});
  expect_rpc_error(rpc::RpcErrorKind::Timeout, [&] { by_default.wait(); },
                   fmt::format("rpc to {} 'sleep' ran for more than 3 s", peer), "default timeout");
  check(without.value_as<double>() == 3.5, "a call with timeout 0 outlived the 3 s default");

  // The caller's own mistakes: InputError at the call, nothing sent.
  expect_error<ctitan::InputError>([&] { rpc::rpc_sync("nobody", "echo", 1); },
                                   "rpc: no worker named 'nobody' (workers: worker0, worker1)", true, "unknown worker");
  expect_error<ctitan::InputError>([&] { rpc::rpc_sync(peer, "echo", IValue(c10::Device(c10::kCPU))); },
                                   "rpc: value of type Device cannot be sent", false, "argument not encodable");
  expect_error<ctitan::InputError>([&] { rpc::rpc_sync(peer, "bad name"); },
                                   "rpc: function name 'bad name' has a character outside [A-Za-z0-9_.:-]", true,
                                   "function name");
  expect_error<ctitan::InputError>([&] { rpc::rpc_sync(peer, "echo", 1, rpc::CallOptions{.timeout_seconds = -1}); },
                                   "timeout_seconds must be >= 0 (got -1)", false, "negative timeout");
  expect_error<ctitan::InputError>([&] { rpc::get_worker_info("nobody"); }, "rpc: no worker named 'nobody'", false,
                                   "get_worker_info of an unknown name");
  expect_error<std::logic_error>([&] { rpc::register_function("late", [] {}); },
                                 "rpc: register_function('late') after init_rpc", false, "registration after init");
  (void)self;
}

}  // namespace rpc_test

namespace {

using namespace rpc_test;

struct Scenario {
  const char* name;
  int world_size;
  std::function<void(const Worker&, rpc::RpcOptions&)> run;  // starts RPC itself
  bool graceful = true;  // ends with a graceful shutdown (kill_peer does not)
};

std::vector<Scenario> scenarios() {
  auto started = [](void (*body)(const Worker&, const std::string&)) {
    return [body](const Worker& w, rpc::RpcOptions& options) {
      rpc::init_rpc(w.self, options);
      body(w, w.name(1 - w.rank));
    };
  };
  return {
      {"calls", 2, started([](const Worker& w, const std::string& peer) { run_calls(w.self, peer); })},
      {"errors", 2,
       [](const Worker& w, rpc::RpcOptions& options) {
         const std::string peer = w.name(1 - w.rank);
         expect_rpc_error(rpc::RpcErrorKind::Shutdown, [&] { rpc::rpc_sync(peer, "echo", 1); },
                          "rpc 'echo' before init_rpc: call ctitan::rpc::init_rpc first", "call before init_rpc");
         options.timeout_seconds = 3;
         rpc::init_rpc(w.self, options);
         run_errors(w.self, peer);
       }},
      {"kill_peer", 2, [](const Worker& w, rpc::RpcOptions& options) { run_kill_peer(w, options); }, false},
      {"shutdown_inflight", 3,
       [](const Worker& w, rpc::RpcOptions& options) { run_shutdown_inflight(w, options); }},
      {"rref", 3, [](const Worker& w, rpc::RpcOptions& options) { run_rref(w, options); }},
      {"dist_autograd", 2, [](const Worker& w, rpc::RpcOptions& options) { run_dist_autograd(w, options); }},
      {"dist_optim", 2, [](const Worker& w, rpc::RpcOptions& options) { run_dist_optim(w, options); }},
  };
}

int run(const std::string& name) {
  auto env = ctitan::distributed::read_dist_env();
  Worker w{fmt::format("worker{}", env.rank), env.rank, env.world_size};
  register_call_functions();
  register_lifetime_functions();
  register_rref_functions();
  register_autograd_functions();
  std::string names;
  for (const auto& scenario : scenarios()) {
    names += (names.empty() ? "" : ", ") + std::string(scenario.name);
    if (name != scenario.name) continue;
    if (env.world_size != scenario.world_size) {
      throw CheckFailed(fmt::format("needs {} processes, got {}", scenario.world_size, env.world_size));
    }
    rpc::RpcOptions options;
    options.init_timeout_seconds = 60;
    scenario.run(w, options);
    rpc::shutdown();  // graceful; nothing when the scenario has shut down already
    const std::string peer = w.name((w.rank + 1) % w.world_size);
    check(!rpc::rpc_running(), "rpc_running() after shutdown");
    expect_rpc_error(rpc::RpcErrorKind::Shutdown, [&] { rpc::rpc_sync(peer, "echo", 1); },
                     "rpc 'echo' after shutdown", "call after shutdown");
    expect_rpc_error(rpc::RpcErrorKind::Shutdown, [&] { rpc::remote(peer, "echo", 1); },
                     "rpc 'echo' after shutdown", "remote() after shutdown");
    expect_error<std::logic_error>([&] { rpc::init_rpc(w.self, options); },
                                   "called twice: RPC starts once per process", false, "a second init_rpc");
    if (scenario.graceful) {
      auto counts = rpc::rref_counts();
      check(counts.all_zero(), "RRef leak counters after shutdown: " + counts.describe());
    }
    fmt::print("{}: {}: {} checks passed\n", w.self, name, checks);
    std::fflush(stdout);
    return 0;
  }
  throw CheckFailed("unknown scenario '" + name + "' (" + names + ")");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    return run(scenario);
  } catch (const std::exception& e) {
    int rank = 0;
    try {
      rank = ctitan::distributed::read_dist_env().rank;
    } catch (...) {
    }
    fmt::print(stderr, "rpc_test_worker: worker{}: {}: FAILED after {} checks: {}\n", rank, scenario,
               rpc_test::checks, std::string(e.what()).substr(0, std::string(e.what()).find('\n')));
    std::fflush(stderr);
    std::_Exit(1);  // no graceful shutdown: the launcher stops the peers
  }
}
