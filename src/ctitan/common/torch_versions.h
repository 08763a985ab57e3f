#pragma once
// What differs between the libtorch versions ctitan builds against (2.11 through 2.15), in one place.
// Each difference names the versions and the header that tells them apart; code elsewhere uses the
// names below and never tests a version itself. scripts/check_libtorch.sh compiles the tree against
// each end of the range.

#include <torch/csrc/autograd/function.h>

#include <memory>
#include <utility>

namespace ctitan::torch_versions {

// Autograd nodes: 2.11 owns a `torch::autograd::Node` through `std::shared_ptr` (function.h, edge.h);
// 2.15 through `c10::intrusive_ptr`, declared in <torch/csrc/autograd/node.h>, a header 2.11 lacks.
// `grad_accumulator()`, `set_history()` and `Edge` take the owning pointer of their version.
#if __has_include(<torch/csrc/autograd/node.h>)
using NodePtr = c10::intrusive_ptr<torch::autograd::Node>;
template <class NodeType, class... Args>
c10::intrusive_ptr<NodeType> make_node(Args&&... args) {
  return c10::make_intrusive<NodeType>(std::forward<Args>(args)...);
}
#else
using NodePtr = std::shared_ptr<torch::autograd::Node>;
template <class NodeType, class... Args>
std::shared_ptr<NodeType> make_node(Args&&... args) {
  return std::make_shared<NodeType>(std::forward<Args>(args)...);
}
#endif

}  // namespace ctitan::torch_versions
