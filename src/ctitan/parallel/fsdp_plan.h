#pragma once
// Applies data parallelism to a built decoder from outside, as torchtitan's parallelize.py:
// the model's code never changes, and which modules form a unit is the family's plan.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctitan/config/job_config.h"
#include "ctitan/models/common/parallelize_plan.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/parallel/fsdp/fsdp_module.h"

namespace ctitan::parallel {

// FSDP (HSDP when groups.replicate is set) in torchtitan's apply_fsdp order: one group per unit of
// the family's plan (ParallelizePlan::fsdp_units), in forward order, then the root. A unit frees
// its parameters after forward as its FreeAfterForward says. A pipeline stage (`pipeline`) holds
// only some of the modules: a unit keeps those the stage has and is skipped when it has none, and
// "default" means no freeing after forward, as torchtitan's `not pp_enabled`: a stage runs several
// microbatches' forwards before their backwards, and each would gather again. A unit nested in
// another's module (the experts in their block) owns its parameters; the experts' units shard
// over `expert_groups` when given (efsdp under expert parallelism), else over `groups`. Throws
// std::logic_error naming the parameter, before anything is sharded, if a parameter of `model` is
// in no unit (a plan bug: FSDP would neither shard nor reduce it).
std::unique_ptr<fsdp::FSDPModule> apply_fsdp(models::TransformerImpl& model, const std::vector<models::FsdpUnit>& units,
                                             fsdp::MeshGroups groups, fsdp::MixedPrecisionPolicy mp,
                                             config::ReshardAfterForward reshard_after_forward, bool pipeline = false,
                                             const std::optional<fsdp::MeshGroups>& expert_groups = std::nullopt);

}  // namespace ctitan::parallel
