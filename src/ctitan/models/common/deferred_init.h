#pragma once
// Building a model without its weights, so that no rank ever holds a whole model it will shard
// (torchtitan builds on the meta device for the same reason).
//
// libtorch's C++ modules cannot be built on the meta device, and a meta parameter cannot take CPU
// or CUDA data later (set_data refuses the change of backend). So a deferred build keeps real
// CPU parameters of the right shapes whose storage is given back right after each module is
// constructed: the peak is one parameter, and the module constructors still run their default
// init, so the default RNG advances exactly as in an eager build. The initial values are drawn
// later, one parameter at a time, in init_weights' order (InitialDraw), and each rank keeps only
// its part of each (parallel::parallelize).
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "ctitan/models/common/transformer.h"

namespace ctitan::models {

// While one lives, the parameters each module constructor of models/ creates on this thread give
// their storage back as soon as that module is built (their shapes and dtypes stay).
class DeferredInitScope {
 public:
  DeferredInitScope();
  ~DeferredInitScope();
  DeferredInitScope(const DeferredInitScope&) = delete;
  DeferredInitScope& operator=(const DeferredInitScope&) = delete;

 private:
  bool previous_;
};

// Gives back the storage of `module`'s own parameters when a DeferredInitScope is open on this
// thread; does nothing otherwise. For models/' constructors.
void release_if_deferred(torch::nn::Module& module);

// A Linear without bias (every projection of the decoder), released under a DeferredInitScope.
torch::nn::Linear bias_free_linear(int64_t in, int64_t out);

// A parameter with elements but no storage: built deferred, its values not drawn yet. Only
// meaningful before FSDP wraps a model: FSDP's resharded module parameters look the same.
bool is_deferred(const torch::Tensor& t);

// One parameter's initial values: the draw fills a tensor of `shape` from the default generator,
// as init_weights fills that parameter.
struct InitialDraw {
  std::string fqn;
  std::vector<int64_t> shape;
  std::function<void(const torch::Tensor&)> draw;
};

// A model built under DeferredInitScope, and the draws (in init_weights' RNG order) that give its
// parameters the values an eager build would have.
struct DeferredModel {
  Transformer model{nullptr};
  std::vector<InitialDraw> draws;
};

// Builds `args`' model on the CPU without its weights. The default generator then stands where
// an eager build leaves it before init_weights.
DeferredModel build_deferred(const ModelArgs& args);

// init_weights' draws, in the order it makes them; a tied head has none of its own.
std::vector<InitialDraw> initial_draws(const TransformerImpl& model);

}  // namespace ctitan::models
