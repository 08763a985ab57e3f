#include "ctitan/ps/ps_functions.h"

#include <chrono>
#include <mutex>
#include <thread>
#include <stdexcept>

#include "ctitan/rpc/state_dict_wire.h"
#include "ctitan/rpc/errors.h"
#include "ctitan/rpc/registry.h"

namespace ctitan::ps {
namespace {

std::mutex g_mutex;
Endpoints g_endpoints;

Endpoints endpoints() {
  std::lock_guard lock(g_mutex);
  return g_endpoints;
}

}  // namespace

void serve(Endpoints e) {
  std::lock_guard lock(g_mutex);
  g_endpoints = std::move(e);
}

void pause_if_server_lost(const std::exception& e) {
  auto* rpc_error = dynamic_cast<const rpc::RpcError*>(&e);
  if (rpc_error && rpc_error->kind() == rpc::RpcErrorKind::PeerLost) std::this_thread::sleep_for(std::chrono::seconds(3));
}

void register_ps_functions() {
  rpc::register_function("ps.join", [](int64_t rank) {
    auto e = endpoints();
    if (!e.join) throw std::runtime_error("ps.join is served by the server (rank 0) only");
    return e.join(rank);
  });
  rpc::register_function("ps.push", [](int64_t rank, int64_t step, const at::Tensor& grads, int64_t tokens,
                                       double loss_sum, double last_latency_s,
                                       const c10::Dict<std::string, at::Tensor>& loader_state) {
    auto e = endpoints();
    if (!e.push) throw std::runtime_error("ps.push is served by the server (rank 0) only");
    return e.push(Push{int(rank), step, grads, tokens, loss_sum, last_latency_s, rpc::from_wire(loader_state)});
  });
  rpc::register_function("ps.embedding", [] {
    auto e = endpoints();
    if (!e.embedding) throw std::runtime_error("ps.embedding is served by the server of ps.mode dist_autograd only");
    return e.embedding();
  });
  rpc::register_function("ps.embed", [](const rpc::RRef& weight, const at::Tensor& tokens) {
    // (B, T) ids -> (B, T, dim); on the weight's owner, inside the caller's autograd context.
    return at::embedding(weight.local_value().toTensor(), tokens);
  });
  rpc::register_function("ps.start", [](int64_t rank) {
    auto e = endpoints();
    if (!e.start) throw std::runtime_error("ps.start is served by the server of ps.mode dist_autograd only");
    return e.start(rank);
  });
  rpc::register_function("ps.ready", [](int64_t rank, int64_t step) {
    auto e = endpoints();
    if (!e.ready) throw std::runtime_error("ps.ready is served by the server of ps.mode dist_autograd only");
    return e.ready(Push{int(rank), step});
  });
  rpc::register_function("ps.report", [](int64_t rank, int64_t step, int64_t tokens, double loss_sum, double grad_norm,
                                         double latency_s, int64_t rpc_bytes, const WireState& loader_state) {
    auto e = endpoints();
    if (!e.report) throw std::runtime_error("ps.report is served by the server of ps.mode dist_autograd only");
    Push report{int(rank), step, torch::Tensor(), tokens, loss_sum, latency_s, rpc::from_wire(loader_state)};
    report.grad_norm = grad_norm;
    report.rpc_bytes = rpc_bytes;
    return e.report(std::move(report));
  });
  rpc::register_function("ps.trainer_state", [] {
    auto e = endpoints();
    if (!e.trainer_state) throw std::runtime_error("ps.trainer_state is served by trainers of ps.mode dist_autograd only");
    return e.trainer_state();
  });
  rpc::register_function("ps.hold", [] {
    auto e = endpoints();
    if (!e.hold) throw std::runtime_error("ps.hold is served by trainers only");
    return e.hold();
  });
}

}  // namespace ctitan::ps
