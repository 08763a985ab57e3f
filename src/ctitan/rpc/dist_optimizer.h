#pragma once
// DistributedOptimizer (PyTorch's torch.distributed.optim.DistributedOptimizer): steps parameters
// that live on several workers, from the gradients of one distributed autograd context.
//
//   rpc::DistributedOptimizer opt("adamw", {w1_rref, w2_rref}, {{"weight_decay", 0.0}});
//   { rpc::dist_autograd::Context ctx; ...forward...; rpc::dist_autograd::backward(ctx, {loss});
//     opt.step(ctx, /*lr=*/1e-3); }
//
// Each parameter is an RRef to a leaf tensor on its owner (the tensor the owner's forward uses).
// One local optimizer per owner is created there by remote(), held as a C++ object that never
// leaves its owner. step() asks every owner at once to step with the context's gradients (those
// gradients live on the owner) and waits for all of them.
#include <ATen/core/Dict.h>

#include <string>
#include <utility>
#include <vector>

#include "ctitan/rpc/dist_autograd.h"
#include "ctitan/rpc/rref.h"

namespace ctitan::rpc {

class DistributedOptimizer {
 public:
  // `optimizer`: "adamw" (ctitan's AdamW; option keys beta1, beta2, eps, weight_decay, with
  // train::AdamWOptions' defaults) or "sgd" (plain p -= lr * grad; no options). Unknown names and
  // option keys are InputErrors here; the owners check them again.
  DistributedOptimizer(const std::string& optimizer, const std::vector<RRef>& params,
                       const c10::Dict<std::string, double>& options = c10::Dict<std::string, double>());

  // The sum, over every owner, of the squares of the context's gradients of its parameters (in
  // fp64): the square of the global gradient norm, so that clipping spans workers.
  double grad_sq_norm(const dist_autograd::Context& context);

  // One step on every owner with learning rate `lr`, each gradient multiplied by `grad_scale`
  // first (a clipping factor; at 1 the gradients are used as they are). A parameter without a
  // gradient in the context is left alone. Failures on any owners become one RpcError naming each.
  void step(const dist_autograd::Context& context, double lr, double grad_scale = 1.0);

 private:
  // Sends `function(optimizer, args...)` to every owner at once and waits for all.
  std::vector<c10::IValue> on_every_owner(const char* function, int64_t context_id, const std::vector<double>& args);
  std::vector<std::pair<std::string, RRef>> local_optimizers_;  // (owner, RRef to its optimizer), by owner name
};

}  // namespace ctitan::rpc
