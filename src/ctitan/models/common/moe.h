#pragma once
// A mixture-of-experts feed-forward, as torchtitan's MoE: a router picks top_k of num_experts
// SwiGLU experts per token, the tokens are sorted by expert and each expert multiplies its
// contiguous rows (ops::grouped_matmul), the outputs are weighted by the router's scores and
// summed, and shared experts (a SwiGLU every token sees) are added. No token is dropped.
// Parameter names are torchtitan's: `moe.router.gate.weight` (E, dim), `moe.experts.w1`/`w3`
// (E, hidden, dim), `moe.experts.w2` (E, dim, hidden), `moe.shared_experts.w1.weight`, and the
// buffer `moe.expert_bias` (E) fp32 of auxiliary-loss-free balancing. Nothing here knows about
// parallelism; parallel/ reads the token counts and moves the bias (moe_balance.h).
#include <torch/torch.h>

#include "ctitan/models/common/model_args.h"
#include "ctitan/models/common/module_hooks.h"

namespace ctitan::models {

class FeedForwardImpl;

// Each token's chosen experts and their weights.
struct Routing {
  torch::Tensor experts;  // (N, top_k) int64
  torch::Tensor weights;  // (N, top_k) fp32: the scores that multiply the experts' outputs
  torch::Tensor scores;   // (N, E) fp32: every expert's score, with its gradient (the balance loss's)
};

class RouterImpl : public torch::nn::Module {
 public:
  RouterImpl(int64_t dim, const MoeArgs& args);
  // x: (N, dim). `bias` (E) fp32 or undefined: added to the scores to choose experts only; the
  // weights are the unbiased scores (DeepSeek-V3).
  Routing forward(const torch::Tensor& x, const torch::Tensor& bias);
  torch::nn::Linear gate{nullptr};

 private:
  MoeArgs args_;
};
TORCH_MODULE(Router);

// num_experts SwiGLUs as three stacked weights, w2(silu(w1 x) * w3 x) per expert.
class GroupedExpertsImpl : public torch::nn::Module {
 public:
  GroupedExpertsImpl(int64_t dim, const MoeArgs& args);
  // x: (N, dim) sorted by expert, counts[e] rows for expert e -> (N, dim)
  torch::Tensor forward(const torch::Tensor& x, const std::vector<int64_t>& counts);
  torch::Tensor w1, w2, w3;  // (E, hidden, dim), (E, dim, hidden), (E, hidden, dim)
};
TORCH_MODULE(GroupedExperts);

class MoEImpl : public torch::nn::Module {
 public:
  explicit MoEImpl(const ModelArgs& args);
  // x: (B, T, dim) -> (B, T, dim). Under grad mode it adds its tokens' choices to
  // tokens_per_expert (a checkpointed block's first run has no grad, its recomputation has:
  // each token is counted once).
  torch::Tensor forward(const torch::Tensor& x);
  const MoeArgs& args() const { return args_; }

  Router router{nullptr};
  GroupedExperts experts{nullptr};
  std::shared_ptr<FeedForwardImpl> shared_experts;  // null without shared experts
  // The model's hooks: the experts run through them (FSDP gathers them there, expert parallelism
  // dispatches their tokens); null: plain calls.
  const ModuleHooks* hooks = nullptr;
  // (E) fp32 buffer, the selection bias; undefined when load_balance_coeff is 0.
  torch::Tensor expert_bias;
  // (E) fp32, the tokens routed to each expert since the last reset (not a buffer: not saved),
  // on the model's device; undefined before the first forward with grad.
  torch::Tensor tokens_per_expert;
  // The balance loss's weight in the training loss: aux_loss_alpha / the step's sequences (set
  // by parallel/, which knows the global batch); 0: no balance loss. And its value summed since
  // the last reset, (0-d) fp32, detached, for the metrics; undefined before the first.
  double aux_loss_weight = 0;
  torch::Tensor aux_loss_sum;

 private:
  MoeArgs args_;
};
TORCH_MODULE(MoE);

}  // namespace ctitan::models
