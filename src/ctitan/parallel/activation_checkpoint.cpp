#include "ctitan/parallel/activation_checkpoint.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "ctitan/common/error.h"

namespace ctitan::parallel {
namespace {

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
    auto input = input_.detach().requires_grad_(true);
    input_ = torch::Tensor();  // the kept activation is no longer needed
    torch::Tensor output;
    {
      torch::AutoGradMode grad(true);
      // The first run's autocast state: the recomputation must compute what it computed.
      const auto device = input.device().type();
      const bool was = at::autocast::is_autocast_enabled(device);
      const auto was_dtype = at::autocast::get_autocast_dtype(device);
      if (autocast_bf16_) {
        at::autocast::set_autocast_enabled(device, true);
        at::autocast::set_autocast_dtype(device, at::kBFloat16);
        at::autocast::increment_nesting();
      }
      output = forward_(input);
      if (autocast_bf16_) {
        if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
        at::autocast::set_autocast_enabled(device, was);
        at::autocast::set_autocast_dtype(device, was_dtype);
      }
    }
    torch::autograd::backward({output}, {grads.at(0)});
    return {input.grad()};
  }

  std::string name() const override { return "ActivationCheckpointBackward"; }

 private:
  torch::Tensor input_;
  models::ModuleHooks::Forward forward_;
  bool autocast_bf16_;
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
    output = forward(input);
  }
  auto node = c10::make_intrusive<CheckpointBackward>(input, forward, autocast_bf16);
  node->set_next_edges(torch::autograd::collect_next_edges(input));
  torch::autograd::set_history(output, node);
  return output;
}

int apply_activation_checkpointing(models::llama::TransformerImpl& model, const config::ActivationCheckpoint& ac) {
  if (ac.mode == config::ActivationCheckpointMode::kNone) return 0;
  int64_t every = 1;
  if (ac.mode == config::ActivationCheckpointMode::kSelective) {
    const auto& option = ac.selective_ac_option;
    if (option == "op") {
      throw ConfigError("activation_checkpoint.selective_ac_option 'op' (operator-level selective AC) is not "
                        "implemented yet; give an integer k to checkpoint every k-th block, or mode = \"full\"");
    }
    size_t used = 0;
    try {
      every = std::stoll(option, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != option.size() || every < 0 || option.empty() || option[0] == '-' || option[0] == '+') {
      throw ConfigError(fmt::format("activation_checkpoint.selective_ac_option must be 'op' or an integer k >= 0 "
                                    "(every k-th block; 0 = every block), got '{}'", option));
    }
    if (every == 0) every = 1;
  }
  int wrapped = 0;
  int64_t count = 0;
  for (const auto& layer : *model.layers) {
    if (++count % every != 0) continue;
    model.hooks.set_around(*layer, [](const torch::Tensor& x, const models::ModuleHooks::Forward& forward) {
      return checkpointed(x, forward);
    });
    ++wrapped;
  }
  return wrapped;
}

}  // namespace ctitan::parallel
