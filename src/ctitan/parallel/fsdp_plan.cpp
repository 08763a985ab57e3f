#include "ctitan/parallel/fsdp_plan.h"

#include <set>
#include <stdexcept>

namespace ctitan::parallel {
namespace {

bool frees_after_forward(models::FreeAfterForward rule, config::ReshardAfterForward policy, bool pipeline) {
  switch (rule) {
    case models::FreeAfterForward::kPerPolicy:
      // "default" is torchtitan's `not pp_enabled`.
      return policy == config::ReshardAfterForward::kAlways ||
             (policy == config::ReshardAfterForward::kDefault && !pipeline);
    case models::FreeAfterForward::kOnlyIfAlways:
      return policy == config::ReshardAfterForward::kAlways;
    case models::FreeAfterForward::kNever:
      return false;
  }
  return false;
}

// How many of the units' modules hold the parameter `param`: those that are a prefix of its FQN
// at a dot. Exactly one is a plan that shards it once.
int units_holding(const std::string& param, const std::set<std::string>& modules) {
  int count = 0;
  for (size_t dot = param.find('.'); dot != std::string::npos; dot = param.find('.', dot + 1)) {
    count += int(modules.count(param.substr(0, dot)));
  }
  return count;
}

}  // namespace

std::unique_ptr<fsdp::FSDPModule> apply_fsdp(models::TransformerImpl& model, const std::vector<models::FsdpUnit>& units,
                                             fsdp::MeshGroups groups, fsdp::MixedPrecisionPolicy mp,
                                             config::ReshardAfterForward reshard_after_forward, bool pipeline) {
  const auto present = model.named_modules("", /*include_self=*/false);
  // Resolved and checked before anything is sharded.
  std::vector<std::pair<std::vector<std::pair<std::string, const torch::nn::Module*>>, bool>> resolved;
  std::set<std::string> sharded;
  for (const auto& unit : units) {
    std::vector<std::pair<std::string, const torch::nn::Module*>> modules;
    for (const auto& fqn : unit.modules) {
      if (const auto* module = present.find(fqn)) {
        modules.emplace_back(fqn, module->get());
        sharded.insert(fqn);
      }
    }
    if (modules.empty()) continue;  // another pipeline stage's
    resolved.emplace_back(std::move(modules), frees_after_forward(unit.free_after_forward, reshard_after_forward, pipeline));
  }
  for (const auto& param : model.named_parameters()) {
    const int units = units_holding(param.key(), sharded);
    if (units != 1) {
      throw std::logic_error("FSDP plan: parameter " + param.key() + " is in " + std::to_string(units) +
                             " units of the model's plan, not one");
    }
  }
  auto fsdp = std::make_unique<fsdp::FSDPModule>(model.hooks, std::move(groups), mp);
  for (const auto& [modules, free_after_forward] : resolved) fsdp->fully_shard(modules, free_after_forward);
  fsdp->fully_shard_root(model);
  return fsdp;
}

}  // namespace ctitan::parallel
