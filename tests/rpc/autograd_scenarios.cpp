// rpc_test_worker scenarios of distributed autograd and the distributed optimizer (2 workers;
// docs/design/rpc.md, decisions 12 and 16). worker0 drives, worker1 serves.
//   dist_autograd  loss = sum(tanh(x w1) w2) with tanh(x w1) computed on worker1 (by rpc_sync, and
//                  by remote() + to_here()): the loss and the gradients of w1 and w2 equal local
//                  autograd's bitwise (the same ops in the same order on the same bytes); .grad()
//                  stays untouched; a nested chain 0 -> 1 -> 0 carries the context (d/dx of 3*2x),
//                  also from an async function's own thread through ContextGuard.
//   dist_optim     w1 owned by worker1, w2 by worker0: 3 steps of DistributedOptimizer("adamw"),
//                  clipped by the global norm (grad_sq_norm across owners), equal 3 steps of one
//                  local components::AdamW bitwise: clip factors, losses and parameters; a failure on
//                  one owner surfaces at step() naming it; gradients of two contexts
//                  accumulate()d equal two local backwards into .grad; two optimizers stepping one shared
//                  parameter from two threads at once lose no update.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "ctitan/common/error.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/dist_autograd.h"
#include "ctitan/rpc/dist_optimizer.h"
#include "ctitan/rpc/registry.h"
#include "ctitan/components/adamw.h"
#include "rpc/scenarios.h"

namespace rpc_test {

namespace dist_autograd = ctitan::rpc::dist_autograd;

void register_autograd_functions() {
  rpc::register_function("tanh_mm", [](const at::Tensor& x, const at::Tensor& w) { return at::tanh(x.mm(w)); });
  rpc::register_function("tanh_mm_rref", [](const at::Tensor& x, const rpc::RRef& w) {
    return at::tanh(x.mm(w.local_value().toTensor()));
  });
  rpc::register_function("mul2", [](const at::Tensor& x) { return x * 2; });
  // Runs on worker1 inside the caller's context: its call back to `via` is recorded too.
  rpc::register_function("nested_scale", [](const std::string& via, const at::Tensor& x) {
    return rpc::rpc_sync(via, "mul2", x).toTensor() * 3;
  });
  // Asynchronous: the nested call is made by another thread, which takes the caller's context
  // with a ContextGuard (without it the call would not be recorded and x would get no gradient).
  rpc::register_function("async_mul2_via", [](const std::string& via, const at::Tensor& x) {
    const auto context = dist_autograd::current_context_id();
    rpc::Future result;
    std::thread([result, context, via, x] {
      try {
        if (!context) throw std::logic_error("async_mul2_via: no dist_autograd context on the callee");
        dist_autograd::ContextGuard guard(*context);
        result.set_value(rpc::rpc_sync(via, "mul2", x));
      } catch (...) {
        result.set_error(std::current_exception());
      }
    }).detach();
    return result;
  });
  rpc::register_function("make_param", [](const at::Tensor& init) { return init.clone().requires_grad_(); });
  rpc::register_function("sum_rref", [](const rpc::RRef& w) { return w.local_value().toTensor().sum(); });
}

namespace {

// Fixed inputs: the bitwise comparisons need no seed, and every worker could rebuild them.
at::Tensor input() { return at::linspace(-1, 1, 12, at::kFloat).view({4, 3}); }
at::Tensor w1_init() { return at::linspace(-0.5, 0.7, 15, at::kFloat).view({3, 5}); }
at::Tensor w2_init() { return at::linspace(0.3, -0.4, 5, at::kFloat).view({5, 1}); }

at::Tensor leaf(const at::Tensor& init) { return init.clone().requires_grad_(); }

// Bitwise: every op here is the local op on the same bytes, in the same order.
void check_equal(const at::Tensor& got, const at::Tensor& expected, const std::string& what) {
  check(got.defined() && at::equal(got, expected),
        fmt::format("{}: differs from local autograd (max abs diff {})", what,
                    got.defined() ? (got - expected).abs().max().item<double>() : -1.0));
}

void gradients_match_local(bool via_remote) {
  const auto x = input();
  auto w1 = leaf(w1_init()), w2 = leaf(w2_init());
  auto w1_ref = leaf(w1_init()), w2_ref = leaf(w2_init());
  auto loss_ref = at::tanh(x.mm(w1_ref)).mm(w2_ref).sum();
  loss_ref.backward();
  const std::string how = via_remote ? "remote()+to_here()" : "rpc_sync";
  dist_autograd::Context ctx;
  at::Tensor h = via_remote ? rpc::remote("worker1", "tanh_mm", x, w1).to_here_as<at::Tensor>()
                            : rpc::rpc_sync("worker1", "tanh_mm", x, w1).toTensor();
  check(h.requires_grad(), how + ": the remote result requires grad");
  auto loss = h.mm(w2).sum();
  check_equal(loss, loss_ref, how + ": loss");
  dist_autograd::backward(ctx, {loss});
  auto grads = dist_autograd::get_gradients(ctx);
  check(grads.size() == 2, fmt::format("{}: {} gradients in the context, expected 2", how, grads.size()));
  check(grads.contains(w1) && grads.contains(w2), how + ": gradients of w1 and w2 are in the context");
  check_equal(grads.at(w1), w1_ref.grad(), how + ": grad of w1 (through worker1)");
  check_equal(grads.at(w2), w2_ref.grad(), how + ": grad of w2");
  check(!w1.grad().defined() && !w2.grad().defined(), how + ": .grad() stays undefined");
}

// Two trainers' optimizers over one parameter on worker1 (the PS's shared embedding), stepping
// from two threads at once: d(sum w)/dw = 1 and SGD with lr 1 subtracts exactly 1 per step, so
// after 2 x kSteps steps every element is its start minus 2 kSteps, exact in fp32 whatever the
// order. Two in-place updates interleaving on the owner (a lock per optimizer instead of one for
// the process) lose parts of one and leave elements too high. The tensor is large (16 MiB) so a
// step takes milliseconds and the steps overlap.
void shared_parameter_loses_no_update() {
  constexpr int kSteps = 20;
  const auto init = at::arange(1 << 22, at::kFloat).remainder(1000);
  rpc::RRef shared = rpc::remote("worker1", "make_param", init);
  std::vector<std::string> failures(2);
  std::vector<std::thread> trainers;
  for (size_t t = 0; t < 2; ++t) {
    trainers.emplace_back([&, t] {
      try {
        rpc::DistributedOptimizer optimizer("sgd", {shared});
        for (int step = 0; step < kSteps; ++step) {
          dist_autograd::Context ctx;
          auto loss = rpc::rpc_sync("worker1", "sum_rref", shared).toTensor();
          dist_autograd::backward(ctx, {loss});
          optimizer.step(ctx, 1.0);
        }
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& thread : trainers) thread.join();
  check(failures[0].empty() && failures[1].empty(), "concurrent steps: " + failures[0] + failures[1]);
  const auto got = shared.to_here_as<at::Tensor>();
  const auto lost = (got - (init - 2 * kSteps)).abs().gt(0).sum().item<int64_t>();
  check(lost == 0, fmt::format("two optimizers stepping one parameter at once: {} of {} elements lost an update", lost,
                               got.numel()));
}

}  // namespace

void run_dist_autograd(const Worker& w, rpc::RpcOptions& options) {
  rpc::init_rpc(w.self, options);
  if (w.rank != 0) return;
  gradients_match_local(false);
  gradients_match_local(true);
  {
    dist_autograd::Context ctx;
    auto x = at::full({3}, 1.5f).requires_grad_();
    auto y = rpc::rpc_sync("worker1", "nested_scale", "worker0", x).toTensor();
    check(at::equal(y, at::full({3}, 9.0f)), "nested chain value 3 * 2 * 1.5");
    dist_autograd::backward(ctx, {y.sum()});
    // d(3 * 2x)/dx = 6, exact in binary floating point.
    check_equal(dist_autograd::get_gradients(ctx).at(x), at::full({3}, 6.0f), "grad through 0 -> 1 -> 0");
    expect_error<std::logic_error>([] { dist_autograd::Context inner; }, "while context", false,
                                   "a second context on one thread");
    check(dist_autograd::current_context_id() == ctx.id(), "current_context_id() is the Context's");
  }
  check(!dist_autograd::current_context_id(), "no current context after the Context is destroyed");
  {
    // Gradients accumulate in the context: a second backward over the same graph (retain_graph,
    // as PyTorch's) adds to the first, on the worker that holds the leaf. 6 + 6, exact.
    dist_autograd::Context ctx;
    auto x = at::full({3}, 1.5f).requires_grad_();
    auto y = rpc::rpc_sync("worker1", "nested_scale", "worker0", x).toTensor();
    dist_autograd::backward(ctx, {y.sum()}, /*retain_graph=*/true);
    dist_autograd::backward(ctx, {y.sum()});
    check_equal(dist_autograd::get_gradients(ctx).at(x), at::full({3}, 12.0f), "two backwards accumulate in the context");
  }
  {
    dist_autograd::Context ctx;
    auto x = at::full({2}, 0.5f).requires_grad_();
    auto y = rpc::rpc_sync("worker1", "async_mul2_via", "worker0", x).toTensor();
    check(y.requires_grad(), "the async function's result requires grad");
    dist_autograd::backward(ctx, {y.sum()});
    check_equal(dist_autograd::get_gradients(ctx).at(x), at::full({2}, 2.0f),
                "grad through an async function's thread (ContextGuard)");
  }
  expect_error<std::invalid_argument>([] { dist_autograd::get_gradients(int64_t(12345)); },
                                      "rpc: no dist_autograd context 12345 on this worker", false,
                                      "get_gradients of an unknown context");
}

void run_dist_optim(const Worker& w, rpc::RpcOptions& options) {
  rpc::init_rpc(w.self, options);
  if (w.rank != 0) return;
  expect_error<ctitan::InputError>([] { rpc::DistributedOptimizer("adam", {}); },
                                   "rpc: DistributedOptimizer 'adam' is unknown (adamw, sgd)", true,
                                   "unknown optimizer");
  c10::Dict<std::string, double> bad;
  bad.insert("momentum", 0.9);
  expect_error<ctitan::InputError>([&] { rpc::DistributedOptimizer("adamw", {}, bad); },
                                   "rpc: DistributedOptimizer 'adamw' has no option 'momentum'", false,
                                   "unknown option");

  {
    // One owner's failure (worker1's "parameter" is a C++ object, so its optimizer was never
    // made) surfaces at step, naming that worker; worker0's step still ran.
    rpc::DistributedOptimizer broken("sgd", {rpc::RRef::local(leaf(w2_init())), rpc::remote("worker1", "make_counter")});
    dist_autograd::Context ctx;
    expect_rpc_error(rpc::RpcErrorKind::Remote, [&] { broken.step(ctx, 0.1); },
                     "rpc: DistributedOptimizer ctitan.dist_optim.step failed: rpc to worker1 'ctitan.dist_optim.step' "
                     "failed on worker1: rpc to worker1 'ctitan.dist_optim.create' failed on worker1: a parameter RRef "
                     "holds a Capsule",
                     "a failed owner at step");
  }

  const auto x = input();
  rpc::RRef w1 = rpc::remote("worker1", "make_param", w1_init());
  rpc::RRef w2 = rpc::RRef::local(leaf(w2_init()));
  c10::Dict<std::string, double> adamw;
  adamw.insert("weight_decay", 0.1);
  adamw.insert("eps", 1e-8);
  rpc::DistributedOptimizer optimizer("adamw", {w1, w2}, adamw);

  auto w1_ref = leaf(w1_init()), w2_ref = leaf(w2_init());
  ctitan::components::AdamWOptions ref_options;
  ref_options.weight_decay = 0.1;
  ref_options.eps = 1e-8;
  ctitan::components::AdamW reference({{"w1", w1_ref}, {"w2", w2_ref}}, ref_options);
  const double lr = 0.05;
  // Clipped to a global norm of 0.1 (below the gradients' norm, so every step clips), as a
  // trainer clipping across owners would: the squared norms are fp64 sums in owner order (worker0's
  // w2, then worker1's w1), which the reference repeats.
  const double max_norm = 0.1;
  auto sq = [](const at::Tensor& g) { return g.to(at::kDouble).pow(2).sum().item<double>(); };
  for (int step = 0; step < 3; ++step) {
    at::Tensor loss;
    double scale = 0;
    {
      dist_autograd::Context ctx;
      auto h = rpc::rpc_sync("worker1", "tanh_mm_rref", x, w1).toTensor();
      loss = h.mm(w2.local_value().toTensor()).sum();
      dist_autograd::backward(ctx, {loss});
      const double norm_sq = optimizer.grad_sq_norm(ctx);
      scale = std::min(1.0, max_norm / (std::sqrt(norm_sq) + 1e-6));
      optimizer.step(ctx, lr, scale);
    }
    auto loss_ref = at::tanh(x.mm(w1_ref)).mm(w2_ref).sum();
    loss_ref.backward();
    const double norm_sq_ref = 0.0 + sq(w2_ref.grad()) + sq(w1_ref.grad());
    const double scale_ref = std::min(1.0, max_norm / (std::sqrt(norm_sq_ref) + 1e-6));
    check(scale == scale_ref && scale < 1, fmt::format("step {}: clip factor {} (reference {})", step, scale, scale_ref));
    {
      torch::NoGradGuard no_grad;
      w1_ref.mutable_grad() = w1_ref.grad() * scale_ref;
      w2_ref.mutable_grad() = w2_ref.grad() * scale_ref;
    }
    reference.step(lr);
    reference.zero_grad();
    check_equal(loss.detach(), loss_ref.detach(), fmt::format("loss of step {}", step));
  }
  check_equal(w1.to_here_as<at::Tensor>(), w1_ref.detach(), "w1 (owned by worker1) after 3 steps");
  check_equal(w2.local_value().toTensor().detach(), w2_ref.detach(), "w2 (owned by worker0) after 3 steps");
  check(!at::equal(w1_ref.detach(), w1_init()), "the steps changed w1");

  // state_dict(): each parameter's AdamW state, fetched from its owner, equals the local
  // optimizer's, in the constructor's order (w1 on worker1, w2 here).
  auto state = optimizer.state_dict();
  check(state.size() == 2, fmt::format("state_dict() of 2 parameters has {} entries", state.size()));
  const auto ref_state = reference.state_dict();
  const std::vector<std::string> names = {"w1", "w2"};
  for (size_t i = 0; i < 2; ++i) {
    for (const std::string field : {"exp_avg", "exp_avg_sq", "step"}) {
      const auto key = "state." + names[i] + "." + field;
      check(state[i].count(field) == 1, fmt::format("state_dict()[{}] has no {}", i, field));
      check_equal(state[i].at(field), ref_state.at(key), "optimizer " + key);
    }
  }
  // load_state_dict() puts states back on the owners: after loading a changed state, the next
  // state_dict() returns it; then the original state goes back.
  auto changed = state;
  for (auto& s : changed) s["exp_avg"] = s["exp_avg"] * 2;
  optimizer.load_state_dict(changed);
  auto reloaded = optimizer.state_dict();
  for (size_t i = 0; i < 2; ++i) check_equal(reloaded[i].at("exp_avg"), changed[i].at("exp_avg"), "a loaded exp_avg");
  expect_error<ctitan::InputError>([&] { optimizer.load_state_dict({state[0]}); },
                                   "rpc: DistributedOptimizer::load_state_dict got 1 parameter states for its 2 parameters",
                                   true, "load_state_dict of the wrong count");
  optimizer.load_state_dict(state);

  // Gradient accumulation across contexts: two microbatches, each in its own context and
  // accumulate()d on the owners, then one clipped step over the sum, equal the local optimizer
  // after two backwards into .grad (the same additions in the same order): norms and parameters
  // bitwise, for 2 steps.
  for (int step = 0; step < 2; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      const auto xm = x * (1.0 + 0.5 * micro);
      dist_autograd::Context ctx;
      auto h = rpc::rpc_sync("worker1", "tanh_mm_rref", xm, w1).toTensor();
      dist_autograd::backward(ctx, {h.mm(w2.local_value().toTensor()).sum()});
      optimizer.accumulate(ctx);
      at::tanh(xm.mm(w1_ref)).mm(w2_ref).sum().backward();
    }
    const double norm_sq = optimizer.grad_sq_norm();
    const double norm_sq_ref = 0.0 + sq(w2_ref.grad()) + sq(w1_ref.grad());
    check(norm_sq == norm_sq_ref, fmt::format("accumulated step {}: squared norm {} (reference {})", step, norm_sq,
                                              norm_sq_ref));
    const double scale = std::min(1.0, max_norm / (std::sqrt(norm_sq) + 1e-6));
    optimizer.step(lr, scale);
    {
      torch::NoGradGuard no_grad;
      w1_ref.mutable_grad() = w1_ref.grad() * scale;
      w2_ref.mutable_grad() = w2_ref.grad() * scale;
    }
    reference.step(lr);
    reference.zero_grad();
  }
  check_equal(w1.to_here_as<at::Tensor>(), w1_ref.detach(), "w1 after 2 accumulated steps");
  check_equal(w2.local_value().toTensor().detach(), w2_ref.detach(), "w2 after 2 accumulated steps");
  // The step cleared the sum: a norm now, before any accumulate(), is 0.
  check(optimizer.grad_sq_norm() == 0, "the accumulated gradients are cleared by the step");

  shared_parameter_loses_no_update();
}

}  // namespace rpc_test
