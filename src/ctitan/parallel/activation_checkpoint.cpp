#include "ctitan/parallel/activation_checkpoint.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "ctitan/common/error.h"
#include "ctitan/common/torch_versions.h"
#include "ctitan/parallel/end_of_backward.h"
#include "ctitan/parallel/op_selective_checkpoint.h"

namespace ctitan::parallel {
namespace {

// Sets the autocast state (bf16 on or off) for one device and restores the previous state on
// destruction, exceptions included: a nesting count left raised would stop every later
// AutocastGuard from clearing the cast cache, and stale bf16 weights would follow.
class AutocastState {
 public:
  AutocastState(c10::DeviceType device, bool bf16) : device_(device), bf16_(bf16) {
    was_ = at::autocast::is_autocast_enabled(device_);
    was_dtype_ = at::autocast::get_autocast_dtype(device_);
    at::autocast::set_autocast_enabled(device_, bf16_);
    if (bf16_) {
      at::autocast::set_autocast_dtype(device_, at::kBFloat16);
      at::autocast::increment_nesting();
    }
  }
  ~AutocastState() {
    if (bf16_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, was_);
    at::autocast::set_autocast_dtype(device_, was_dtype_);
  }
  AutocastState(const AutocastState&) = delete;
  AutocastState& operator=(const AutocastState&) = delete;

 private:
  c10::DeviceType device_;
  bool bf16_;
  bool was_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

// The autograd node of a checkpointed call. Holds the input (the only activation kept) and the
// forward; its backward recomputes the forward with grad and back-propagates through it in a
// nested (reentrant) backward, which accumulates the parameters' gradients as the plain graph
// would, then hands the input's gradient on.
class CheckpointBackward : public torch::autograd::Node {
 public:
  CheckpointBackward(torch::Tensor input, models::ModuleHooks::Forward forward, bool autocast_bf16)
      : input_(std::move(input)), forward_(std::move(forward)), autocast_bf16_(autocast_bf16) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    TORCH_CHECK(input_.defined(), "activation checkpoint: backward ran twice through one checkpointed block");
    if (!grads.at(0).defined()) return {torch::Tensor()};  // the output did not reach the loss
    auto input = input_.detach().requires_grad_(true);
    input_ = torch::Tensor();  // the kept activation is no longer needed
    torch::Tensor output;
    {
      torch::AutoGradMode grad(true);
      // The first run's autocast state, whatever is active now: it must compute what it computed.
      AutocastState autocast(input.device().type(), autocast_bf16_);
      output = forward_(input);
    }
    {
      NestedBackward nested;  // the end-of-backward callbacks it queues wait for the outer pass
      torch::autograd::backward({output}, {grads[0]});
    }
    return {input.grad()};
  }

  std::string name() const override { return "ActivationCheckpointBackward"; }

 private:
  torch::Tensor input_;
  models::ModuleHooks::Forward forward_;
  bool autocast_bf16_;
};

// Turns autocast's weight-cast cache off for a scope: the first, no-grad run would otherwise
// cache bf16 weight copies without grad history, which a later use of a shared weight in the
// same autocast scope would pick up and so get no gradient.
class NoAutocastCache {
 public:
  NoAutocastCache() : was_(at::autocast::is_autocast_cache_enabled()) { at::autocast::set_autocast_cache_enabled(false); }
  ~NoAutocastCache() { at::autocast::set_autocast_cache_enabled(was_); }
  NoAutocastCache(const NoAutocastCache&) = delete;
  NoAutocastCache& operator=(const NoAutocastCache&) = delete;

 private:
  bool was_;
};

}  // namespace

torch::Tensor checkpointed(const torch::Tensor& input, const models::ModuleHooks::Forward& forward) {
  // Evaluation (no grad) or an input that needs none: nothing to keep, nothing to recompute.
  if (!torch::GradMode::is_enabled() || !input.requires_grad()) return forward(input);
  const auto device = input.device().type();
  const bool autocast_bf16 =
      at::autocast::is_autocast_enabled(device) && at::autocast::get_autocast_dtype(device) == at::kBFloat16;
  torch::Tensor output;
  {
    torch::NoGradGuard no_grad;  // the forward's activations are freed as it goes
    NoAutocastCache no_cache;
    output = forward(input);
  }
  TORCH_CHECK(!output.is_same(input), "activation checkpoint: the checkpointed forward returned its input");
  auto node = torch_versions::make_node<CheckpointBackward>(input, forward, autocast_bf16);
  node->set_next_edges(torch::autograd::collect_next_edges(input));
  torch::autograd::set_history(output, node);
  return output;
}

int apply_activation_checkpointing(models::TransformerImpl& model, const std::vector<std::string>& units,
                                   const config::ActivationCheckpoint& ac) {
  if (ac.mode == config::ActivationCheckpointMode::kNone) return 0;
  // This part's units, in forward order: a pipeline stage holds some of the model's.
  const auto present = model.named_modules("", /*include_self=*/false);
  std::vector<const torch::nn::Module*> modules;
  for (const auto& fqn : units) {
    if (const auto* module = present.find(fqn)) modules.push_back(module->get());
  }
  int64_t every = 1;
  if (ac.mode == config::ActivationCheckpointMode::kSelective) {
    const auto selective = config::selective_ac(ac);
    if (selective.op) {
      for (const auto* module : modules) {
        model.hooks.set_around(*module, [](const torch::Tensor& x, const models::ModuleHooks::Forward& forward) {
          return op_selective_checkpointed(x, forward);
        });
      }
      return int(modules.size());
    }
    every = selective.every;
  }
  int wrapped = 0;
  int64_t count = 0;
  for (const auto* module : modules) {
    // torchtitan counts every k-th block of the model part, as here.
    if (++count % every != 0) continue;
    model.hooks.set_around(*module, [](const torch::Tensor& x, const models::ModuleHooks::Forward& forward) {
      return checkpointed(x, forward);
    });
    ++wrapped;
  }
  return wrapped;
}

}  // namespace ctitan::parallel
