#include "ctitan/parallel/end_of_backward.h"

#include <torch/csrc/autograd/engine.h>

#include <vector>

namespace ctitan::parallel {
namespace {

// Callbacks queued from inside nested backwards, one list per nesting level on this thread: the
// engine runs a nested backward on the thread that runs the checkpoint's node.
thread_local std::vector<std::vector<std::function<void()>>> tls_deferred;

}  // namespace

NestedBackward::NestedBackward() { tls_deferred.emplace_back(); }

NestedBackward::~NestedBackward() {
  auto callbacks = std::move(tls_deferred.back());
  tls_deferred.pop_back();
  for (auto& callback : callbacks) queue_end_of_backward(std::move(callback));
}

void queue_end_of_backward(std::function<void()> callback) {
  if (!tls_deferred.empty()) {
    tls_deferred.back().push_back(std::move(callback));
    return;
  }
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(callback));
}

}  // namespace ctitan::parallel
