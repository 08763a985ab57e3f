#include "ctitan/parallel/parallelize_llama.h"

namespace ctitan::parallel {

std::unique_ptr<fsdp::FSDPModule> apply_fsdp(models::llama::TransformerImpl& model, fsdp::MeshGroups groups,
                                             fsdp::MixedPrecisionPolicy mp, config::ReshardAfterForward reshard_after_forward,
                                             bool pipeline) {
  // "default" is torchtitan's `not pp_enabled`.
  const bool reshard_blocks = reshard_after_forward == config::ReshardAfterForward::kAlways ||
                              (reshard_after_forward == config::ReshardAfterForward::kDefault && !pipeline);
  auto fsdp = std::make_unique<fsdp::FSDPModule>(model.hooks, std::move(groups), mp);
  if (model.tok_embeddings) fsdp->fully_shard({{"tok_embeddings", model.tok_embeddings.ptr().get()}}, reshard_blocks);
  for (auto* block : model.blocks()) {
    fsdp->fully_shard({{"layers." + std::to_string(block->layer_id), block}}, reshard_blocks);
  }
  if (model.output) {
    fsdp->fully_shard({{"norm", model.norm.ptr().get()}, {"output", model.output.ptr().get()}},
                      reshard_after_forward == config::ReshardAfterForward::kAlways);
  }
  fsdp->fully_shard_root(model);
  return fsdp;
}

}  // namespace ctitan::parallel
