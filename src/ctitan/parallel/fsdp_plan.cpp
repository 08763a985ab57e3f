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
// at a dot. The innermost shards it; none is a plan bug.
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
                                             config::ReshardAfterForward reshard_after_forward, bool pipeline,
                                             const std::optional<fsdp::MeshGroups>& expert_groups) {
  const auto present = model.named_modules("", /*include_self=*/false);
  // Resolved and checked before anything is sharded.
  struct Resolved {
    std::vector<std::pair<std::string, const torch::nn::Module*>> modules;
    bool free_after_forward;
    bool experts;
  };
  std::vector<Resolved> resolved;
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
    resolved.push_back({std::move(modules), frees_after_forward(unit.free_after_forward, reshard_after_forward, pipeline),
                        unit.experts});
  }
  for (const auto& param : model.named_parameters()) {
    if (units_holding(param.key(), sharded) == 0) {
      throw std::logic_error("FSDP plan: parameter " + param.key() + " is in no unit of the model's plan");
    }
  }
  // parent[u]: the innermost unit whose module holds unit u's (an experts unit in its block), or -1.
  std::vector<int64_t> parent(resolved.size(), -1);
  for (size_t u = 0; u < resolved.size(); ++u) {
    size_t longest = 0;
    for (size_t p = 0; p < resolved.size(); ++p) {
      for (const auto& [outer, _] : resolved[p].modules) {
        for (const auto& [inner, __] : resolved[u].modules) {
          if (p != u && inner.rfind(outer + ".", 0) == 0 && outer.size() > longest) {
            parent[u] = int64_t(p);
            longest = outer.size();
          }
        }
      }
    }
    if (parent[u] >= 0 && !resolved[u].experts) {
      throw std::logic_error("FSDP plan: unit " + resolved[u].modules.front().first + " is nested in " +
                             resolved[size_t(parent[u])].modules.front().first + "; only routed experts may nest");
    }
  }
  auto fsdp = std::make_unique<fsdp::FSDPModule>(model.hooks, std::move(groups), mp);
  for (size_t u = 0; u < resolved.size(); ++u) {
    const auto& unit = resolved[u];
    // The units nested in this one's modules own their parameters.
    std::vector<std::string> nested;
    for (size_t c = 0; c < resolved.size(); ++c) {
      if (parent[c] == int64_t(u)) nested.push_back(resolved[c].modules.front().first);
    }
    fsdp->fully_shard(unit.modules, unit.free_after_forward, nested,
                      unit.experts ? expert_groups : std::optional<fsdp::MeshGroups>());
  }
  // Backward runs the units in reverse, a nested unit right after its parent begins.
  std::vector<size_t> backward;
  for (size_t u = resolved.size(); u-- > 0;) {
    if (parent[u] >= 0) continue;
    backward.push_back(u);
    for (size_t c = resolved.size(); c-- > 0;) {
      if (parent[c] == int64_t(u)) backward.push_back(c);
    }
  }
  fsdp->set_backward_order(backward);
  fsdp->fully_shard_root(model);
  return fsdp;
}

}  // namespace ctitan::parallel
