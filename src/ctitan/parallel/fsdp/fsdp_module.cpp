#include "ctitan/parallel/fsdp/fsdp_module.h"

#include <torch/csrc/autograd/engine.h>

#include <chrono>
#include <set>
#include <utility>

#include "ctitan/parallel/end_of_backward.h"

namespace ctitan::parallel::fsdp {

// Identity in forward. Its backward, which runs when the gradient of the wrapped tensor is
// computed, calls back into the FSDPModule: wrapped around a group's output it marks the start
// of the group's backward, around its input the end.
struct BackwardHook : torch::autograd::Function<BackwardHook> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t module,
                               int64_t phase, int64_t group) {
    ctx->saved_data["module"] = module;
    ctx->saved_data["phase"] = phase;
    ctx->saved_data["group"] = group;
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* fsdp = reinterpret_cast<FSDPModule*>(ctx->saved_data["module"].toInt());
    fsdp->on_backward(FSDPModule::Phase(ctx->saved_data["phase"].toInt()), size_t(ctx->saved_data["group"].toInt()));
    return {grads[0], torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

FSDPModule::FSDPModule(models::ModuleHooks& hooks, MeshGroups groups, MixedPrecisionPolicy mp)
    : hooks_(hooks), groups_(std::move(groups)), mp_(mp) {}

FSDPModule::~FSDPModule() { hooks_.clear(); }

void FSDPModule::fully_shard(const std::vector<std::pair<std::string, const torch::nn::Module*>>& modules,
                             bool reshard_after_forward, const std::vector<std::string>& nested,
                             const std::optional<MeshGroups>& groups) {
  TORCH_CHECK(!modules.empty(), "fully_shard: no modules");
  std::set<const at::TensorImpl*> taken;
  for (const auto& g : param_groups_) {
    for (const auto& sp : g->params()) taken.insert(sp.module_param.unsafeGetTensorImpl());
  }
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& [prefix, module] : modules) {
    for (const auto& item : module->named_parameters(/*recurse=*/true)) {
      if (taken.count(item.value().unsafeGetTensorImpl())) continue;  // already in an inner group
      const auto fqn = prefix + "." + item.key();
      bool inner = false;
      for (const auto& n : nested) inner = inner || fqn.rfind(n + ".", 0) == 0;
      if (!inner) params.emplace_back(fqn, item.value());
    }
  }
  const size_t index = param_groups_.size();
  param_groups_.push_back(std::make_unique<FSDPParamGroup>(modules.front().first, std::move(params), groups.value_or(groups_), mp_,
                                                       reshard_after_forward));
  backward_prefetch_.push_back(int64_t(index) - 1);
  pending_post_backwards_.push_back(0);
  began_backward_.push_back(false);
  ended_backward_.push_back(false);
  hooks_.add_pre_forward(*modules.front().second, [this, index](const torch::Tensor& x) { return pre_forward(index, x); });
  hooks_.add_post_forward(*modules.back().second, [this, index](const torch::Tensor& y) { return post_forward(index, y); });
}

void FSDPModule::set_backward_order(const std::vector<size_t>& order) {
  std::set<size_t> distinct(order.begin(), order.end());
  TORCH_CHECK(order.size() == param_groups_.size() && distinct.size() == order.size() &&
                  (order.empty() || *distinct.rbegin() < order.size()),
              "set_backward_order: each group once");
  for (size_t k = 0; k < order.size(); ++k) backward_prefetch_.at(order[k]) = k + 1 < order.size() ? int64_t(order[k + 1]) : -1;
}

void FSDPModule::fully_shard_root(const torch::nn::Module& root) {
  hooks_.add_post_forward(root, [this](const torch::Tensor& y) {
    if (!torch::GradMode::is_enabled()) {
      for (auto& g : param_groups_) g->reshard();
    }
    return y;
  });
}

void FSDPModule::unshard_with_prefetch(size_t i, int64_t prefetch) {
  // Group i's gathered buffer is copied out and freed before the prefetch allocates the next one
  // (FSDP2's order): issuing the prefetch first would keep two gather buffers alive beside i's
  // parameters during the copy-out. The prefetch still runs during group i's compute.
  exposed_seconds_ += param_groups_[i]->unshard();
  if (prefetch >= 0 && size_t(prefetch) < param_groups_.size()) param_groups_[size_t(prefetch)]->unshard_async();
}

torch::Tensor FSDPModule::pre_forward(size_t i, const torch::Tensor& input) {
  // Inside backward (a checkpointed block's recomputation) the next group's forward is over:
  // no prefetch, which would gather a group nothing uses until the end of backward frees it.
  unshard_with_prefetch(i, callback_queued_ ? -1 : int64_t(i) + 1);
  if (!torch::GradMode::is_enabled()) return input;
  ++pending_post_backwards_[i];
  if (!input.requires_grad()) return input;  // token ids: the end-of-backward callback covers it
  return BackwardHook::apply(input, reinterpret_cast<int64_t>(this), int64_t(Phase::kPostBackward), int64_t(i));
}

torch::Tensor FSDPModule::post_forward(size_t i, const torch::Tensor& output) {
  // Inside backward (a nested group's forward in a checkpointed block's recomputation) its
  // backward comes next: kept gathered for it, as FSDP2 keeps groups in its pre-backward state;
  // its post-backward frees it.
  if (param_groups_[i]->reshard_after_forward() && !callback_queued_) param_groups_[i]->reshard();
  if (!torch::GradMode::is_enabled() || !output.requires_grad()) return output;
  return BackwardHook::apply(output, reinterpret_cast<int64_t>(this), int64_t(Phase::kPreBackward), int64_t(i));
}

void FSDPModule::on_backward(Phase phase, size_t i) {
  if (!callback_queued_) {
    callback_queued_ = true;
    queue_end_of_backward([this] { finish_backward(); });  // after a recomputation's nested backward too
  }
  if (phase == Phase::kPreBackward) pre_backward(i);
  else post_backward(i);
}

void FSDPModule::pre_backward(size_t i) {
  began_backward_[i] = true;
  unshard_with_prefetch(i, backward_prefetch_[i]);
}

void FSDPModule::post_backward(size_t i) {
  if (pending_post_backwards_[i] == 0) return;
  --pending_post_backwards_[i];
  ended_backward_[i] = true;
  // At most one reduction in flight: the previous group's completes while this group's
  // gradients are copied into its reduce buffer, bounding the memory held by communication.
  for (auto& g : param_groups_) {
    if (g->reduce_pending()) exposed_seconds_ += g->finish_reduce();
  }
  // The parameters are freed before the reduce buffer is allocated (FSDP2's order): their
  // gradients are tensors of their own, so nothing below reads the gathered values.
  if (reshard_after_backward_) param_groups_[i]->reshard();
  param_groups_[i]->post_backward(sync_);
}

void FSDPModule::finish_backward() {
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = param_groups_.size(); i-- > 0;) {
    if (began_backward_[i] && !ended_backward_[i]) post_backward(i);
  }
  // One forward per backward (no pipeline): nothing may stay owed after the step's backward.
  for (size_t i = param_groups_.size(); i-- > 0;) {
    if (reshard_after_backward_ && pending_post_backwards_[i] > 0 && !began_backward_[i]) post_backward(i);
  }
  std::fill(began_backward_.begin(), began_backward_.end(), false);
  std::fill(ended_backward_.begin(), ended_backward_.end(), false);
  for (auto& g : param_groups_) {
    exposed_seconds_ += g->finish_reduce();
    if (reshard_after_backward_) g->reshard();
  }
  grad_sync_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  callback_queued_ = false;
}

double FSDPModule::take_grad_sync_seconds() { return std::exchange(grad_sync_seconds_, 0.0); }

std::vector<std::pair<std::string, torch::Tensor>> FSDPModule::sharded_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& g : param_groups_) {
    for (const auto& sp : g->params()) out.emplace_back(sp.fqn, sp.sharded);
  }
  return out;
}

ShardLayouts FSDPModule::shard_layouts() const {
  ShardLayouts out;
  for (const auto& g : param_groups_) {
    for (const auto& sp : g->params()) out[sp.fqn] = ShardLayout{sp.global_shape, {sp.row_offset}};
  }
  return out;
}

double FSDPModule::take_exposed_comm_seconds() {
  double s = exposed_seconds_;
  exposed_seconds_ = 0;
  return s;
}

}  // namespace ctitan::parallel::fsdp
