#pragma once
// Applies data parallelism to a built decoder from outside, as torchtitan's parallelize.py:
// the model's code never changes.
#include <memory>
#include <string>

#include "ctitan/config/job_config.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/parallel/fsdp/fsdp_module.h"

namespace ctitan::parallel {

// FSDP (HSDP when groups.replicate is set) in torchtitan's apply_fsdp order: the token
// embeddings, each transformer block, [norm, output] as one group, then the root.
// [norm, output] reshards only under ReshardAfterForward::kAlways, since backward would gather it
// again at once. A pipeline stage (`pipeline`) holds only some of these modules; "default" then
// means no resharding after forward, as torchtitan's `not pp_enabled`: a stage runs several
// microbatches' forwards before their backwards, and each would gather again.
std::unique_ptr<fsdp::FSDPModule> apply_fsdp(models::TransformerImpl& model, fsdp::MeshGroups groups,
                                             fsdp::MixedPrecisionPolicy mp, config::ReshardAfterForward reshard_after_forward,
                                             bool pipeline = false);

}  // namespace ctitan::parallel
