// rpc_test_worker scenario `rref` (3 workers; docs/design/rpc.md, decisions 9-11). worker0 drives,
// worker1 owns most values, worker2 is the third worker that forks reach; 1 and 2 only serve.
// remote() and to_here(), local_value() on the owner only, C++ objects (local_object) that never
// leave their owner, remote() to self, RRef::local, failures
// of the function surfacing at to_here() (every kind), a to_here() timeout, RRefs as arguments (to
// the owner, and forked 0 -> 2 for a value owned by 1, dropped in both orders) and as results (from
// an owner parent and from a user parent), then, after every handle is dropped, leak counters
// falling to zero on all three workers before shutdown (and after it, in rpc_test_worker.cpp).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/registry.h"
#include "rpc/scenarios.h"

namespace rpc_test {

namespace {

// How long the RRef protocol's messages (confirmations, deletes) may take to settle. They are
// asynchronous and need a few round trips; 10 s is generous on a loaded 2-core machine.
constexpr double kSettle = 10;

// RRefs that worker2 keeps between calls: a fork that outlives the call that brought it.
std::mutex kept_mutex;
std::vector<rpc::RRef> kept;

// A C++ object that lives on its owner behind an RRef (as DistributedOptimizer's local optimizers).
struct Counter : torch::CustomClassHolder {
  std::atomic<int64_t> count{0};
};
struct NotACounter : torch::CustomClassHolder {};

double sum_of(const rpc::RRef& r) { return r.to_here_as<at::Tensor>().sum().item<double>(); }

std::vector<int64_t> counts_vector() {
  auto c = rpc::rref_counts();
  return {c.owner_rrefs, c.forks, c.pending_users, c.pending_futures};
}

bool all_zero(const std::vector<int64_t>& v) {
  for (auto n : v) {
    if (n != 0) return false;
  }
  return true;
}

}  // namespace

void register_rref_functions() {
  // Works on the owner (its value) and on a user (fetched: a nested call to the owner).
  rpc::register_function("rref_sum", [](const rpc::RRef& r) { return sum_of(r); });
  rpc::register_function("rref_is_owner", [](const rpc::RRef& r) { return r.is_owner(); });
  rpc::register_function("keep", [](const rpc::RRef& r) {
    std::lock_guard<std::mutex> lock(kept_mutex);
    kept.push_back(r);
    return sum_of(r);
  });
  rpc::register_function("kept_sum", [] {
    std::lock_guard<std::mutex> lock(kept_mutex);
    return kept.empty() ? -1.0 : sum_of(kept.front());
  });
  rpc::register_function("drop_kept", [] {
    std::lock_guard<std::mutex> lock(kept_mutex);
    int64_t n = int64_t(kept.size());
    kept.clear();
    return n;
  });
  // An RRef as a result: the parent is the owner, or a user of another worker's value.
  rpc::register_function("make_local_rref", [](const at::Tensor& x) { return rpc::RRef::local(x * 2); });
  rpc::register_function("make_remote_rref", [](const std::string& owner, const at::Tensor& x) {
    return rpc::remote(owner, "add", x, 1);
  });
  rpc::register_function("rref_counts", [] { return counts_vector(); });
  rpc::register_function("make_counter", [] { return c10::IValue::make_capsule(c10::make_intrusive<Counter>()); });
  rpc::register_function("bump", [](const rpc::RRef& r) { return int64_t(++r.local_object<Counter>()->count); });
}

namespace {

void check_tensor(const rpc::RRef& r, const at::Tensor& expected, const std::string& what) {
  auto got = r.to_here_as<at::Tensor>();
  check(at::equal(got, expected), fmt::format("{}: to_here gave {}", what, got.sum().item<double>()));
}

void remote_and_to_here() {
  rpc::RRef r = rpc::remote("worker1", "add", at::ones({2}), 3);
  check(r.valid() && !r.is_owner(), "remote() to worker1 gives a user RRef");
  check(r.owner().name == "worker1" && r.owner().id == 1, "owner() of a remote() RRef");
  check_tensor(r, at::full({2}, 4.0f), "remote add");
  check_tensor(r, at::full({2}, 4.0f), "a second to_here");
  wait_until([&] { return r.confirmed_by_owner(); }, kSettle, "the owner confirms a remote() RRef");
  expect_error<ctitan::InputError>([&] { r.local_value(); }, "rpc: local_value() on a user RRef of worker1", false,
                                   "local_value() on a user");
  // Arguments to the owner: it sees its own OwnerRRef.
  check(rpc::rpc_sync("worker1", "rref_is_owner", r).toBool(), "the owner receives an owner RRef");
  check(rpc::rpc_sync("worker1", "rref_sum", r).toDouble() == 8, "the owner reads its value");
  check(!rpc::rpc_sync("worker2", "rref_is_owner", r).toBool(), "a third worker receives a user RRef");
  check(rpc::rpc_sync("worker2", "rref_sum", r).toDouble() == 8, "a third worker fetches from the owner");

  // remote() to self, and RRef::local: owner RRefs here.
  rpc::RRef self_made = rpc::remote("worker0", "add", at::ones({1}), 1);
  check(self_made.is_owner() && self_made.confirmed_by_owner(), "remote() to self gives an owner RRef");
  check(at::equal(self_made.local_value().toTensor(), at::full({1}, 2.0f)), "local_value() of remote() to self");
  check_tensor(self_made, at::full({1}, 2.0f), "to_here() on the owner");
  rpc::RRef local = rpc::RRef::local(at::full({3}, 5.0f));
  check(local.is_owner() && local.owner().name == "worker0", "RRef::local is owned here");
  check(rpc::rpc_sync("worker2", "rref_sum", local).toDouble() == 15, "worker2 fetches an RRef::local from worker0");
  check(rpc::rpc_sync("worker1", "rref_sum", self_made).toDouble() == 2, "worker1 fetches a self-made RRef");
}

void failures_surface_at_to_here() {
  rpc::RRef failed = rpc::remote("worker1", "fail");
  for (int i = 0; i < 2; ++i) {
    expect_rpc_error(rpc::RpcErrorKind::Remote, [&] { failed.to_here(); },
                     "rpc to worker1 'fail' failed on worker1: boom from worker1", "to_here of a failed remote()");
  }
  expect_rpc_error(rpc::RpcErrorKind::UnknownFunction, [&] { rpc::remote("worker1", "nope").to_here(); },
                   "rpc to worker1: no function 'nope' is registered there", "to_here of an unknown function");
  expect_rpc_error(rpc::RpcErrorKind::BadArguments, [&] { rpc::remote("worker1", "add", 1, 2).to_here(); },
                   "rpc to worker1 'add': argument 1 expected Tensor, got int", "to_here after bad arguments");
  // A third worker that receives the failed RRef gets the same failure.
  expect_rpc_error(rpc::RpcErrorKind::Remote, [&] { rpc::rpc_sync("worker2", "rref_sum", failed); },
                   "rpc to worker2 'rref_sum' failed on worker2: rpc to worker1 'fail' failed on worker1: boom from "
                   "worker1",
                   "a fork of a failed RRef");
  // On the owner, local_value() throws it too.
  rpc::RRef self_failed = rpc::remote("worker0", "fail");
  expect_rpc_error(rpc::RpcErrorKind::Remote, [&] { self_failed.local_value(); },
                   "rpc to worker0 'fail' failed on worker0: boom from worker0", "local_value of a failed remote()");
  // to_here's own timeout; the value still arrives later.
  rpc::RRef slow = rpc::remote("worker1", "sleep", 1.5);
  expect_rpc_error(rpc::RpcErrorKind::Timeout, [&] { slow.to_here(0.3); },
                   "rpc to worker1 'to_here' ran for more than 0.3 s", "to_here timeout");
  check(slow.to_here_as<double>() == 1.5, "to_here after a timed-out to_here");
  // A value that cannot leave its owner fails at to_here, with one line.
  rpc::RRef device = rpc::remote("worker1", "device");
  expect_rpc_error(rpc::RpcErrorKind::Remote, [&] { device.to_here(); },
                   "rpc to worker1 'to_here' failed on worker1: its value cannot be sent: rpc: value of type Device",
                   "to_here of a value the codec cannot carry", true);
}

void objects_stay_on_their_owner() {
  rpc::RRef counter = rpc::remote("worker1", "make_counter");
  check(rpc::rpc_sync("worker1", "bump", counter).toInt() == 1, "the owner reaches its object");
  check(rpc::rpc_sync("worker1", "bump", counter).toInt() == 2, "the same object on the second call");
  expect_rpc_error(rpc::RpcErrorKind::Remote, [&] { counter.to_here(); },
                   "rpc to worker1 'to_here' failed on worker1: its value cannot be sent: rpc: value of type Capsule "
                   "cannot leave its owner",
                   "to_here of a C++ object", true);
  rpc::RRef here = rpc::RRef::local(c10::IValue::make_capsule(c10::make_intrusive<Counter>()));
  check(++here.local_object<Counter>()->count == 1, "local_object() on the owner");
  expect_error<ctitan::InputError>([&] { here.local_object<NotACounter>(); },
                                   "rpc: local_object() of an RRef whose value is Capsule", false,
                                   "local_object() of another class");
  expect_error<ctitan::InputError>([&] { rpc::RRef::local(at::ones({1})).local_object<Counter>(); },
                                   "rpc: local_object() of an RRef whose value is Tensor", false,
                                   "local_object() of a tensor");
}

void forks_to_a_third_worker() {
  // The creator drops its reference first: worker2's fork keeps the value alive on worker1.
  {
    rpc::RRef r = rpc::remote("worker1", "add", at::full({2}, 1.0f), 1);
    check(rpc::rpc_sync("worker2", "keep", r).toDouble() == 4, "worker2 keeps a fork");
  }
  // Once worker0's delete has been acknowledged the fork alone holds the value.
  wait_until([] { return rpc::rref_counts().pending_futures == 0; }, kSettle, "worker0's delete is acknowledged");
  check(rpc::rpc_sync("worker2", "kept_sum").toDouble() == 4, "the fork outlives its creator's reference");
  auto owner_counts = rpc::rpc_sync("worker1", "rref_counts").to<std::vector<int64_t>>();
  check(owner_counts[0] >= 1 && owner_counts[1] >= 1,
        fmt::format("the owner counts the fork it keeps the value for (owner_rrefs {}, forks {})", owner_counts[0],
                    owner_counts[1]));
  check(rpc::rpc_sync("worker2", "drop_kept").toInt() == 1, "worker2 drops its fork");
  // The third worker drops first: the creator's reference stays valid.
  rpc::RRef r = rpc::remote("worker1", "add", at::full({2}, 2.0f), 1);
  check(rpc::rpc_sync("worker2", "keep", r).toDouble() == 6, "worker2 keeps a second fork");
  check(rpc::rpc_sync("worker2", "drop_kept").toInt() == 1, "worker2 drops it");
  wait_until([] { return all_zero(rpc::rpc_sync("worker2", "rref_counts").to<std::vector<int64_t>>()); }, kSettle,
             "worker2's counters settle");
  check_tensor(r, at::full({2}, 3.0f), "the creator's RRef after the fork is gone");
}

void rrefs_as_results() {
  auto from_owner = rpc::rpc_sync("worker1", "make_local_rref", at::ones({2}));
  rpc::RRef a = rpc::from_ivalue<rpc::RRef>(from_owner);
  check(!a.is_owner() && a.owner().name == "worker1", "an RRef returned by its owner");
  check_tensor(a, at::full({2}, 2.0f), "to_here of an RRef returned by its owner");
  rpc::RRef b = rpc::rpc_async("worker2", "make_remote_rref", "worker1", at::ones({2})).value_as<rpc::RRef>();
  check(!b.is_owner() && b.owner().name == "worker1", "an RRef returned by another user (worker2)");
  check_tensor(b, at::full({2}, 2.0f), "to_here of an RRef returned by another user");
  rpc::RRef c = rpc::rpc_async("worker2", "make_remote_rref", "worker0", at::ones({2})).value_as<rpc::RRef>();
  check(c.is_owner(), "an RRef to a value here, returned by worker2, is the owner RRef");
  check(at::equal(c.local_value().toTensor(), at::full({2}, 2.0f)), "local_value() of it");
}

}  // namespace

void run_rref(const Worker& w, rpc::RpcOptions& options) {
  options.init_timeout_seconds = 120;  // workers 1 and 2 wait at the shutdown barrier meanwhile
  rpc::init_rpc(w.self, options);
  if (w.rank != 0) return;  // serve until worker0 reaches shutdown
  remote_and_to_here();
  failures_surface_at_to_here();
  objects_stay_on_their_owner();
  forks_to_a_third_worker();
  rrefs_as_results();
  // Every handle above is gone: the owners must free everything without shutdown's help.
  wait_until(
      [] {
        return all_zero(counts_vector()) &&
               all_zero(rpc::rpc_sync("worker1", "rref_counts").to<std::vector<int64_t>>()) &&
               all_zero(rpc::rpc_sync("worker2", "rref_counts").to<std::vector<int64_t>>());
      },
      kSettle, "leak counters of all three workers fall to zero once every RRef is dropped");
}

}  // namespace rpc_test
