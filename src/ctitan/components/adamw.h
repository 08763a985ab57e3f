#pragma once
// AdamW with decoupled weight decay, keyed by fully-qualified parameter name so that its state
// can be saved, resharded and loaded by name.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "ctitan/common/state_dict.h"

namespace ctitan::components {

struct AdamWOptions {
  double lr = 8e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_params, AdamWOptions options);

  // One update with learning rate `lr`. Parameters whose grad is undefined are skipped.
  void step(double lr);
  // Drops gradients (set_to_none), so no memory is spent on zeros between steps.
  void zero_grad();
  std::vector<torch::Tensor> params() const;

  // Keys: state.{fqn}.exp_avg, state.{fqn}.exp_avg_sq, state.{fqn}.step.
  StateDict state_dict() const;
  // The layouts of the state_dict() entries that are sharded like their parameter (the moments),
  // from the parameters' layouts by FQN; the step counts are whole.
  ShardLayouts state_layouts(const ShardLayouts& param_layouts) const;
  void load_state_dict(const StateDict& state);

 private:
  struct ParamState {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  std::vector<ParamState> states_;
  AdamWOptions options_;
};

}  // namespace ctitan::components
