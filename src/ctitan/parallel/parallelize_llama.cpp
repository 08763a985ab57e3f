#include "ctitan/parallel/parallelize_llama.h"

namespace ctitan::parallel {

std::unique_ptr<fsdp::FSDPModule> apply_fsdp(models::llama::TransformerImpl& model, fsdp::MeshGroups groups,
                                             fsdp::MixedPrecisionPolicy mp, config::ReshardAfterForward reshard_after_forward) {
  // "default" is torchtitan's `not pp_enabled`; there is no pipeline parallelism yet.
  const bool reshard_blocks = reshard_after_forward != config::ReshardAfterForward::kNever;
  auto fsdp = std::make_unique<fsdp::FSDPModule>(model.hooks, std::move(groups), mp);
  fsdp->fully_shard({{"tok_embeddings", model.tok_embeddings.ptr().get()}}, reshard_blocks);
  for (size_t i = 0; i < model.layers->size(); ++i) {
    fsdp->fully_shard({{"layers." + std::to_string(i), model.layers->ptr(i).get()}}, reshard_blocks);
  }
  fsdp->fully_shard({{"norm", model.norm.ptr().get()}, {"output", model.output.ptr().get()}},
                    reshard_after_forward == config::ReshardAfterForward::kAlways);
  fsdp->fully_shard_root(model);
  return fsdp;
}

}  // namespace ctitan::parallel
