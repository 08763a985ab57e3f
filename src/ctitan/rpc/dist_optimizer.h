#pragma once
// DistributedOptimizer (PyTorch's torch.distributed.optim.DistributedOptimizer): steps parameters
// that live on several workers, from the gradients of one distributed autograd context, or of
// several accumulated on the owners (gradient accumulation).
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

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/rpc/dist_autograd.h"
#include "ctitan/rpc/rref.h"

namespace ctitan::rpc {

class DistributedOptimizer {
 public:
  // `optimizer`: "adamw" (ctitan's AdamW; option keys beta1, beta2, eps, weight_decay, with
  // components::AdamWOptions' defaults) or "sgd" (plain p -= lr * grad; no options). Unknown names and
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

  // Gradient accumulation: one context per microbatch, each accumulate()d into a sum on every
  // owner, then the norm and one step over that sum (which the step clears). A second forward and
  // backward in one context cannot do it: FAST-mode backward expects every send function the
  // context recorded to take part, and the first forward's never do again (docs/RPC.md).
  void accumulate(const dist_autograd::Context& context);
  double grad_sq_norm();
  void step(double lr, double grad_scale = 1.0);

  // Every parameter's optimizer state, fetched from its owner, in the order of the constructor's
  // `params`: "exp_avg", "exp_avg_sq" and "step" for adamw (components::AdamW's), nothing for sgd.
  // For checkpoints: PyTorch's DistributedOptimizer has none, which leaves a resumed run with
  // fresh moments on every owner.
  std::vector<StateDict> state_dict();
  // Puts a state_dict() back on the owners (one entry per parameter, same order, same shapes);
  // a missing key or a wrong count is an InputError naming it.
  void load_state_dict(const std::vector<StateDict>& state);

 private:
  double grad_sq_norm(int64_t context_id);  // kAccumulated in the .cpp: the accumulated sum
  void step(int64_t context_id, double lr, double grad_scale);
  // Sends `function(optimizer, args(owner index)...)` to every owner at once and waits for all.
  std::vector<c10::IValue> on_every_owner(const char* function,
                                          const std::function<std::vector<c10::IValue>(size_t)>& args);
  std::vector<std::pair<std::string, RRef>> local_optimizers_;  // (owner, RRef to its optimizer), by owner name
  std::vector<std::vector<size_t>> owned_params_;  // by owner, as local_optimizers_: the constructor's indices
  size_t num_params_ = 0;
};

}  // namespace ctitan::rpc
