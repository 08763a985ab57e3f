#pragma once
// Forward hooks for libtorch C++ modules, which lack Python's register_forward_pre_hook and
// register_forward_hook. A model calls each submodule that outside code may want to wrap through
// ModuleHooks::call; with no hooks registered that is a plain call. parallel/fsdp uses it to
// gather parameters before a block runs and to free them after, without the model knowing;
// parallel/activation_checkpoint wraps a block's forward itself (an "around" hook), inside the
// pre/post hooks, as torchtitan applies activation checkpointing before FSDP.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <vector>

namespace ctitan::models {

class ModuleHooks {
 public:
  // Each returns the tensor that replaces the input (pre) or the output (post); returning its
  // argument unchanged is allowed.
  using Hook = std::function<torch::Tensor(const torch::Tensor&)>;
  using Forward = std::function<torch::Tensor(const torch::Tensor&)>;
  // Runs the module's forward (the second argument) on the input its own way. The forward may
  // be called again later (recomputation), so a model passes one that owns what it captures.
  using Around = std::function<torch::Tensor(const torch::Tensor&, const Forward&)>;

  void add_pre_forward(const torch::nn::Module& module, Hook hook) { pre_[&module].push_back(std::move(hook)); }
  void add_post_forward(const torch::nn::Module& module, Hook hook) { post_[&module].push_back(std::move(hook)); }
  // One around hook per module: a second would have to say how it nests.
  void set_around(const torch::nn::Module& module, Around around) { around_[&module] = std::move(around); }
  // The causal attention of a training sequence, in place of ops::causal_attention, as
  // torchtitan's context parallelism swaps SDPA: q (B, T, H, D), k and v (B, T, H_kv, D) before
  // GQA's repeat (H % H_kv == 0) -> (B, T, H * D). Not used with a KV cache.
  using Attention = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;
  void set_attention(Attention attention) { attention_ = std::move(attention); }
  const Attention& attention() const { return attention_; }
  // A MoE layer's routed experts, in place of computing every expert here, as torchtitan's
  // expert parallelism wraps GroupedExperts: `routed` (N k, dim) sorted by expert id, `counts`
  // (E) int64 on its device, rows per expert; `local` computes the experts this rank holds on
  // rows sorted by them, given their row counts -> (N k, dim) in `routed`'s order.
  using LocalExperts = std::function<torch::Tensor(const torch::Tensor&, const std::vector<int64_t>&)>;
  using Experts = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const LocalExperts&)>;
  void set_experts(Experts experts) { experts_ = std::move(experts); }
  const Experts& experts() const { return experts_; }
  void clear() {
    pre_.clear();
    post_.clear();
    around_.clear();
    attention_ = nullptr;
    experts_ = nullptr;
  }

  // forward(input) between `module`'s pre hooks (registration order) and its post hooks.
  template <class Forward>
  torch::Tensor call(const torch::nn::Module& module, torch::Tensor input, Forward&& forward) const {
    if (auto it = pre_.find(&module); it != pre_.end()) {
      for (const auto& hook : it->second) input = hook(input);
    }
    auto around = around_.find(&module);
    auto output = around == around_.end() ? forward(input) : around->second(input, Forward(forward));
    if (auto it = post_.find(&module); it != post_.end()) {
      for (const auto& hook : it->second) output = hook(output);
    }
    return output;
  }

 private:
  std::map<const torch::nn::Module*, std::vector<Hook>> pre_, post_;
  std::map<const torch::nn::Module*, Around> around_;
  Attention attention_;
  Experts experts_;
};

}  // namespace ctitan::models
