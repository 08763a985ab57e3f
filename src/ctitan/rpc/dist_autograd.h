#pragma once
// Distributed autograd (PyTorch's torch.distributed.autograd, upstream's engine): a backward pass
// that follows the RPCs of a forward pass across workers.
//
//   {
//     rpc::dist_autograd::Context ctx;                       // current on this thread until destroyed
//     auto h = rpc::rpc_sync("worker1", "layer", x, w1);     // recorded: send/recv functions both sides
//     auto loss = h.toTensor().mm(w2).sum();
//     rpc::dist_autograd::backward(ctx, {loss});             // runs worker1's part too
//     auto grads = rpc::dist_autograd::get_gradients(ctx);   // {w1: ..., w2: ...}; .grad() untouched
//   }
//
// Inside a context every call (and remote(), to_here()) is recorded, whether or not a tensor
// requires grad: a result may require grad when no argument does. A function running on the
// callee carries the caller's context, so its own nested calls are recorded too. Gradients of
// leaves accumulate per context, on the worker that holds the leaf (FAST mode, as PyTorch).
#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace ctitan::rpc::dist_autograd {

// A new context, current on this thread for the object's lifetime. Needs RPC running; one context
// per thread at a time (a second is a std::logic_error). Destruction releases it here and on every
// worker it reached; it never throws (after shutdown it only forgets the context locally).
class Context {
 public:
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  int64_t id() const { return id_; }

 private:
  int64_t id_;
};

// Makes context `id` current on this thread for its lifetime: for a continuation (an async
// function's thread, a then() callback) that must record its calls in a context it did not create.
class ContextGuard {
 public:
  explicit ContextGuard(int64_t id);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  int64_t previous_;
};

// The context current on this thread (a Context's, or the caller's inside a function a recorded
// call runs), if any: what a continuation passes to ContextGuard.
std::optional<int64_t> current_context_id();

// Runs the backward pass from `roots` (scalars) through every worker the context's calls reached.
// A failure anywhere is a std::runtime_error naming the context.
void backward(const Context& context, const std::vector<at::Tensor>& roots, bool retain_graph = false);

// This worker's accumulated gradients of the context, keyed by leaf tensor.
c10::Dict<at::Tensor, at::Tensor> get_gradients(const Context& context);
c10::Dict<at::Tensor, at::Tensor> get_gradients(int64_t context_id);  // e.g. on an owner, by id

}  // namespace ctitan::rpc::dist_autograd
