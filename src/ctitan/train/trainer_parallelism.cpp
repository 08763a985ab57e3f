// The Trainer's parallelism: applied to the built model from outside, as torchtitan's
// parallelize step (pipeline split, then per stage TP, activation checkpointing, FSDP or DDP),
// and the groups the gradient norm spans. The step loop is in trainer.cpp.
#include <spdlog/spdlog.h>

#include "ctitan/common/dtype_names.h"
#include "ctitan/common/error.h"
#include "ctitan/config/config_fields.h"
#include "ctitan/parallel/activation_checkpoint.h"
#include "ctitan/parallel/data_parallel_parts.h"
#include "ctitan/parallel/ddp.h"
#include "ctitan/parallel/fsdp_plan.h"
#include "ctitan/parallel/pipeline/pipeline_parallel.h"
#include "ctitan/components/autocast.h"
#include "ctitan/train/trainer.h"

namespace ctitan::train {

void Trainer::refuse_layouts_the_model_lacks(const models::ModelArgs& args) const {
  if (dist_ && args.tie_word_embeddings && dist_->dims.pp_enabled()) {
    // The head reads the embedding's weight, and PP puts them on the first and the last stage:
    // the weight and its gradient would have to travel between them every step.
    throw ConfigError(fmt::format("model.flavor '{}' of {} ties the output layer to tok_embeddings, which pipeline "
                                  "parallelism cannot split; use an untied flavor or another layout",
                                  config_.model.flavor, config_.model.name));
  }
}

// Parallelism is applied to the built model from outside, as torchtitan's parallelize step.
void Trainer::setup_parallelism() {
  // torchtitan's order: pipeline split, then per stage TP -> activation checkpointing -> FSDP;
  // AC also applies to one process.
  if (dist_ && dist_->dims.pp_enabled()) setup_pipeline();
  if (dist_ && dist_->dims.tp_enabled()) {
    parallel::tp::validate_tensor_parallel(model_->args(), config_.training.seq_len, dist_->dims.tp);
    const bool loss_parallel = !config_.parallelism.disable_loss_parallel;
    const bool async = config_.parallelism.enable_async_tensor_parallel;
    tensor_parallel_ =
        std::make_unique<parallel::tp::TensorParallel>(model_parts(), dist_->mesh->group("tp"), loss_parallel, async);
    spdlog::info("TP over {} ranks: column-wise wq/wk/wv/w1/w3, row-wise wo/w2, sequence-parallel norms, "
                 "vocab-sharded embeddings and output, loss parallel {}{}", dist_->dims.tp,
                 loss_parallel ? "on" : "off (logits all-gathered)",
                 async ? "; async TP (collectives micro-pipelined with their matmuls)" : "");
  }
  for (auto& part : more_stage_models_) parallel::apply_activation_checkpointing(*part, config_.activation_checkpoint);
  if (int wrapped = parallel::apply_activation_checkpointing(*model_, config_.activation_checkpoint)) {
    const auto& ac = config_.activation_checkpoint;
    spdlog::info("activation checkpointing {}{}: {} of {} blocks recompute their activations in backward{}",
                 config::name_of(ac.mode), ac.mode == config::ActivationCheckpointMode::kSelective ? " " + ac.selective_ac_option : "",
                 wrapped, model_->layers->size(),
                 ac.mode == config::ActivationCheckpointMode::kSelective && ac.selective_ac_option == "op"
                     ? " (except matmul, attention and tp reduce-scatter outputs, kept)" : "");
  }
  if (!dist_) return;
  const auto& dims = dist_->dims;
  if (dims.fsdp_enabled()) {
    // Every rank built the same full model from the same seed, so each can take its own shard
    // without a broadcast.
    parallel::fsdp::MeshGroups groups{dist_->mesh->group("dp_shard"),
                                      dims.dp_replicate > 1 ? dist_->mesh->group("dp_replicate") : nullptr};
    shard_group_ = groups.shard;
    parallel::fsdp::MixedPrecisionPolicy mp{
        bf16_ ? torch::kBFloat16 : torch::kFloat,
        config_.training.mixed_precision_reduce};
    const auto& p = config_.parallelism;
    data_parallel_ = wrap_each_part([&](models::TransformerImpl& part) -> PartWrapper {
      return parallel::apply_fsdp(part, groups, mp, p.fsdp_reshard_after_forward, dims.pp_enabled());
    });
    sync_every_microbatch_ = p.fsdp_gradient_sync == config::GradientSync::kEveryMicrobatch;
    spdlog::info("{} over dp_shard {} x dp_replicate {}: params {}, reduce {}, reshard_after_forward {}, "
                 "gradient sync {}", dims.dp_replicate > 1 ? "HSDP" : "FSDP", dims.dp_shard, dims.dp_replicate,
                 *dtype_name(mp.param_dtype), *dtype_name(mp.reduce_dtype), config::name_of(p.fsdp_reshard_after_forward),
                 config::name_of(p.fsdp_gradient_sync));
  } else if (dims.ddp_enabled()) {
    size_t buckets = 0;
    data_parallel_ = wrap_each_part([&](models::TransformerImpl& part) -> PartWrapper {
      std::vector<std::pair<std::string, torch::Tensor>> named;
      for (const auto& item : part.named_parameters()) named.emplace_back(item.key(), item.value());
      auto ddp = std::make_unique<parallel::DistributedDataParallel>(std::move(named), dp_group_,
                                                                     config_.parallelism.bucket_cap_mb);
      buckets += ddp->num_buckets();
      return ddp;
    });
    spdlog::info("DDP over {} replicas, {} gradient buckets of <= {} MB", dims.dp_replicate, buckets,
                 config_.parallelism.bucket_cap_mb);
  }
}

std::vector<models::TransformerImpl*> Trainer::model_parts() const {
  std::vector<models::TransformerImpl*> parts{model_.ptr().get()};
  for (const auto& part : more_stage_models_) parts.push_back(part.ptr().get());
  return parts;
}

Trainer::PartWrapper Trainer::wrap_each_part(const std::function<PartWrapper(models::TransformerImpl&)>& wrap) {
  const auto parts = model_parts();
  if (parts.size() == 1) {
    auto wrapped = wrap(*parts.front());
    if (pipeline_) stage_data_parallel_[stage_of_part_.at(0)] = wrapped.get();
    return wrapped;
  }
  std::vector<std::unique_ptr<parallel::DataParallel>> wrapped;
  for (auto* part : parts) wrapped.push_back(wrap(*part));
  auto all = std::make_unique<parallel::DataParallelParts>(std::move(wrapped));
  for (size_t i = 0; i < parts.size(); ++i) stage_data_parallel_[stage_of_part_.at(i)] = &all->part(i);
  return all;
}

void Trainer::setup_pipeline() {
  auto stage = parallel::pipeline::split_into_stages(*model_, config_, int(dist_->mesh->local_rank("pp")));
  if (!stage.plan.warning.empty()) spdlog::warn("{}", stage.plan.warning);
  spdlog::info("{}", stage.describe());
  more_stage_models_ = std::move(stage.more_models);
  stage_of_part_ = stage.stages;
  stage_models_[stage.stages[0]] = model_.get();
  for (size_t k = 1; k < stage.stages.size(); ++k) stage_models_[stage.stages[k]] = more_stage_models_[k - 1].get();
  const auto& args = model_->args();
  // The residual stream's dtype crosses: fp32 (embeddings are not autocast, and bf16 autocast
  // adds the blocks' outputs onto fp32), or FSDP's param_dtype, in which the embeddings compute.
  const auto dtype = bf16_ && dist_->dims.fsdp_enabled() ? torch::kBFloat16 : torch::kFloat;
  // Under TP the stream between blocks is sequence parallel: each tp rank sends its T/tp rows to
  // the same tp rank of the next stage.
  parallel::pipeline::BoundarySpec boundary{{config_.parallelism.pipeline_parallel_microbatch_size,
                                             config_.training.seq_len / dist_->dims.tp, args.dim},
                                            dtype, device_};
  parallel::pipeline::StageFunctions functions{
      [this](int stage, const torch::Tensor& input) {
        components::AutocastGuard autocast(bf16_, device_.type());
        return stage_models_.at(stage)->forward(input);
      },
      [this](const torch::Tensor& logits, const torch::Tensor& labels) {
        components::AutocastGuard autocast(bf16_, device_.type());
        return summed_loss(logits, labels);
      },
      // FSDP or DDP (applied after this, per stage): one reduction per step, after the stage's
      // last backward; FSDP's gathered parameters stay for the microbatches' backwards until then.
      [this](int stage, bool last, bool sync) {
        auto it = stage_data_parallel_.find(stage);
        if (it == stage_data_parallel_.end()) return;
        it->second->set_requires_gradient_sync(sync);
        it->second->set_reshard_after_backward(last);
      }};
  pipeline_ = std::make_unique<parallel::pipeline::PipelineRuntime>(stage.plan.shape, stage.plan.kind, stage.pp_rank,
                                                                    dist_->mesh->group("pp"), std::move(boundary),
                                                                    std::move(functions));
}

components::GradNormGroups Trainer::make_grad_norm_groups() const {
  components::GradNormGroups groups{shard_group_.get(), nullptr, {}};
  if (pipeline_) groups.pp = dist_->mesh->group("pp").get();
  if (tensor_parallel_) {
    groups.tp = &tensor_parallel_->group();
    for (const auto& [fqn, p] : trained_parameters()) groups.tp_replicated.push_back(tensor_parallel_->replicated(fqn));
  }
  return groups;
}

}  // namespace ctitan::train
