#pragma once
// Async TP computes a module's column-wise projections in one fused call before the module's
// forward (collective_matmul.h: the all-gather pipelined with all of them), and the module then
// calls each projection as usual; this holds the fused call's outputs until each projection's own
// hook takes its one. A projection called on any other input than the one the outputs were made
// from finds nothing and runs its plain forward: the stash only saves work, it never decides a
// value. Cleared when the module's forward ends, so nothing it held outlives that forward.
#include <torch/torch.h>

#include <map>
#include <optional>

namespace ctitan::parallel::tp {

class ProjectionStash {
 public:
  // `outputs[m]` is projection m's output for `input`.
  void put(const torch::Tensor& input, std::map<const torch::nn::Module*, torch::Tensor> outputs) {
    input_ = input;
    outputs_ = std::move(outputs);
  }
  // Projection `module`'s output for `input`, if the fused call made it; handed out once.
  std::optional<torch::Tensor> take(const torch::nn::Module& module, const torch::Tensor& input) {
    auto it = outputs_.find(&module);
    if (it == outputs_.end() || !input_.defined() || !input.is_same(input_)) {
      ++misses_;
      return std::nullopt;
    }
    auto output = std::move(it->second);
    outputs_.erase(it);
    return output;
  }
  // Projections that found nothing and ran unfused: none in the Llama model (its tests check).
  int64_t misses() const { return misses_; }
  void clear() {
    input_ = torch::Tensor();
    outputs_.clear();
  }

 private:
  torch::Tensor input_;
  std::map<const torch::nn::Module*, torch::Tensor> outputs_;
  int64_t misses_ = 0;
};

}  // namespace ctitan::parallel::tp
