#include "ctitan/parallel/fsdp_plan.h"

namespace ctitan::parallel {

std::unique_ptr<fsdp::FSDPModule> apply_fsdp(models::TransformerImpl& model, fsdp::MeshGroups groups,
                                             fsdp::MixedPrecisionPolicy mp, config::ReshardAfterForward reshard_after_forward,
                                             bool pipeline) {
  // "default" is torchtitan's `not pp_enabled`.
  const bool reshard_blocks = reshard_after_forward == config::ReshardAfterForward::kAlways ||
                              (reshard_after_forward == config::ReshardAfterForward::kDefault && !pipeline);
  auto fsdp = std::make_unique<fsdp::FSDPModule>(model.hooks, std::move(groups), mp);
  // A tied head multiplies by the embedding's weight at the end of forward and first thing in
  // backward: the embedding group stays unsharded after forward, as torchtitan's root group does,
  // and its reduce-scatter (at the end of backward, its input being token ids) sees both uses.
  const bool reshard_embedding = reshard_blocks && !model.tied_head;
  if (model.tok_embeddings) fsdp->fully_shard({{"tok_embeddings", model.tok_embeddings.ptr().get()}}, reshard_embedding);
  for (auto* block : model.blocks()) {
    fsdp->fully_shard({{"layers." + std::to_string(block->layer_id), block}}, reshard_blocks);
  }
  // norm and output are one group, as torchtitan's; a pipeline split between them
  // (module_fqns_per_model_part) leaves each stage its own.
  std::vector<std::pair<std::string, const torch::nn::Module*>> head;
  if (model.norm) head.emplace_back("norm", model.norm.ptr().get());
  if (model.output) head.emplace_back("output", model.output.ptr().get());
  if (!head.empty()) fsdp->fully_shard(head, reshard_after_forward == config::ReshardAfterForward::kAlways);
  fsdp->fully_shard_root(model);
  return fsdp;
}

}  // namespace ctitan::parallel
