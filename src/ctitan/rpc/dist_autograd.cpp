#include "ctitan/rpc/dist_autograd.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/autograd/autograd.h>
#include <torch/csrc/distributed/autograd/context/container.h>

#include <stdexcept>

#include "ctitan/common/message_text.h"
#include "ctitan/rpc/agent.h"
#include "ctitan/rpc/detail.h"

namespace ctitan::rpc::dist_autograd {

namespace {

namespace tda = torch::distributed::autograd;

std::string one_line(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return first_line(c10_error->what_without_backtrace());
  return first_line(e.what());
}

}  // namespace

Context::Context() {
  // The container exists from init_rpc on; without RPC there is nothing to record calls with.
  detail::running_agent("dist_autograd::Context", nullptr);
  auto& container = tda::DistAutogradContainer::getInstance();
  if (container.hasValidContext()) {
    throw std::logic_error(fmt::format("rpc: a dist_autograd::Context while context {} is current on this thread",
                                       container.currentContextId()));
  }
  id_ = container.newContext()->contextId();
}

Context::~Context() {
  auto& container = tda::DistAutogradContainer::getInstance();
  try {
    if (rpc_running()) {
      // Also sends a cleanup to every worker the context reached.
      container.releaseContextIfPresent(id_);
    }
  } catch (const std::exception&) {
    // A peer that is gone cannot be told; the context is dropped here regardless.
  }
  if (container.currentContextId() == id_) container.clearCurrentContext();
}

ContextGuard::ContextGuard(int64_t id) : previous_(tda::DistAutogradContainer::currentContextId()) {
  tda::DistAutogradContainer::forceCurrentContextId(id);
}

ContextGuard::~ContextGuard() { tda::DistAutogradContainer::forceCurrentContextId(previous_); }

std::optional<int64_t> current_context_id() {
  try {
    auto& container = tda::DistAutogradContainer::getInstance();
    if (container.hasValidContext()) return tda::DistAutogradContainer::currentContextId();
  } catch (const c10::Error&) {
    // The container does not exist before init_rpc: no context either.
  }
  return std::nullopt;
}

void backward(const Context& context, const std::vector<at::Tensor>& roots, bool retain_graph) {
  try {
    tda::backward(context.id(), roots, retain_graph);
  } catch (const std::exception& e) {
    throw std::runtime_error(
        fmt::format("rpc: dist_autograd backward in context {} failed: {}", context.id(), one_line(e)));
  }
}

c10::Dict<at::Tensor, at::Tensor> get_gradients(const Context& context) { return get_gradients(context.id()); }

c10::Dict<at::Tensor, at::Tensor> get_gradients(int64_t context_id) {
  try {
    return tda::DistAutogradContainer::getInstance().retrieveContext(context_id)->getGradients();
  } catch (const c10::Error& e) {
    throw std::invalid_argument(fmt::format("rpc: no dist_autograd context {} on this worker ({})", context_id,
                                            first_line(e.what_without_backtrace())));
  }
}

}  // namespace ctitan::rpc::dist_autograd
