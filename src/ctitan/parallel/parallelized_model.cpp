#include "ctitan/parallel/parallelized_model.h"

#include <spdlog/spdlog.h>

#include <map>

#include "ctitan/common/dtype_names.h"
#include "ctitan/common/error.h"
#include "ctitan/components/autocast.h"
#include "ctitan/components/loss.h"
#include "ctitan/config/config_fields.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/parallel/activation_checkpoint.h"
#include "ctitan/parallel/data_parallel_parts.h"
#include "ctitan/parallel/ddp.h"
#include "ctitan/parallel/deferred_params.h"
#include "ctitan/parallel/fsdp_plan.h"
#include "ctitan/parallel/pipeline/pipeline_parallel.h"

namespace ctitan::parallel {

ParallelizedModel::~ParallelizedModel() = default;

void refuse_layouts_the_model_lacks(const models::ModelArgs& args, const distributed::ParallelDims& dims,
                                    const config::JobConfig& config) {
  if (args.tie_word_embeddings && dims.pp_enabled()) {
    // The head reads the embedding's weight, and PP puts them on the first and the last stage:
    // the weight and its gradient would have to travel between them every step.
    throw ConfigError(fmt::format("model.flavor '{}' of {} ties the output layer to tok_embeddings, which pipeline "
                                  "parallelism cannot split; use an untied flavor or another layout",
                                  config.model.flavor, config.model.name));
  }
  if (args.moe.aux_loss_alpha > 0 && (dims.tp_enabled() || dims.cp_enabled())) {
    // The balance loss is per sequence; TP's sequence parallelism and CP give a rank part of each.
    throw ConfigError(fmt::format("model.aux_loss_alpha {} needs whole sequences on each rank: not with "
                                  "parallelism.tensor_parallel_degree {} or context_parallel_degree {}",
                                  args.moe.aux_loss_alpha, dims.tp, dims.cp));
  }
  if (args.latent_attention() && dims.cp_enabled()) {
    // Ring attention passes keys and values of one head width; latent attention's differ (qk vs v).
    throw ConfigError(fmt::format("model.name {} uses latent attention, which context parallelism does not take: set "
                                  "parallelism.context_parallel_degree to 1", config.model.name));
  }
  const int64_t ep = config.parallelism.expert_parallel_degree;
  if (ep == 1) return;
  // ParallelDims checked that ep divides dp_shard.
  if (args.moe.num_experts == 0) {
    throw ConfigError(fmt::format("parallelism.expert_parallel_degree {} needs a mixture-of-experts model; model.name "
                                  "{} is dense", ep, config.model.name));
  }
  if (args.moe.num_experts % ep != 0) {
    throw ConfigError(fmt::format("model.num_experts {} is not divisible by parallelism.expert_parallel_degree {}",
                                  args.moe.num_experts, ep));
  }
}

std::unique_ptr<ParallelizedModel> parallelize(models::DeferredModel model, const distributed::DistContext& dist,
                                               const config::JobConfig& config, torch::Device device) {
  std::unique_ptr<ParallelizedModel> out(new ParallelizedModel());
  out->bf16_ = config.training.mixed_precision_param == torch::kBFloat16;
  out->device_type_ = device.type();
  move_deferred(*model.model, device);
  const auto& spec = models::model_spec(model.model->args().family);
  if (!spec.parallelize_plan) throw std::logic_error("model family " + spec.name + " registers no parallelize plan");
  out->plan_ = spec.parallelize_plan(model.model->args());
  out->parts_.push_back(std::move(model.model));
  out->ranks_per_batch_ = dist.dims.tp * dist.dims.pp * dist.dims.cp;
  // torchtitan's order: pipeline split, then per stage TP -> CP -> activation checkpointing ->
  // FSDP or DDP; activation checkpointing also applies to one process. None of them reads a weight, and
  // each keeps only this rank's part of it; the weights are drawn once the parts are known:
  // before DDP, which broadcasts rank 0's values as it wraps, or after FSDP, whose shards are
  // written in place.
  if (dist.dims.pp_enabled()) out->apply_pipeline(dist, config, device);
  if (dist.dims.tp_enabled()) out->apply_tensor_parallel(dist, config);
  if (dist.dims.ep_enabled()) out->apply_expert_parallel(dist);
  if (dist.dims.cp_enabled()) out->apply_context_parallel(dist, config);
  out->apply_checkpointing(config);
  if (!dist.dims.fsdp_enabled()) out->draw_initial_weights(model.draws);
  out->apply_data_parallel(dist, config);
  if (dist.dims.fsdp_enabled()) out->draw_initial_weights(model.draws);
  // Ranks route different tokens through the same experts across the batch (dp x cp) and across
  // tp (each its share of the sequence); pp stages hold different layers.
  out->expert_balance_ = std::make_unique<ExpertBalance>(
      out->part_pointers(), std::vector<std::shared_ptr<distributed::Communicator>>{
                                dist.batch_group(), dist.dims.tp_enabled() ? dist.mesh->group("tp") : nullptr});
  // The balance loss is a mean over the step's sequences, each rank's microbatches a share of them.
  if (const double alpha = out->args().moe.aux_loss_alpha; alpha > 0) {
    const auto& t = config.training;
    const int64_t sequences = t.global_batch_size > 0 ? t.global_batch_size : t.local_batch_size * dist.dims.dp();
    for (auto* part : out->part_pointers()) {
      for (auto* block : part->blocks()) {
        if (block->moe) block->moe->aux_loss_weight = alpha / double(sequences);
      }
    }
  }
  // The parameters are fixed from here on.
  out->grad_norm_groups_ = {out->shard_group_.get(), nullptr, {}, out->pp_group_.get()};
  if (out->tensor_parallel_) {
    out->grad_norm_groups_.tp = &out->tensor_parallel_->group();
    for (const auto& [fqn, p] : out->trained_parameters()) {
      out->grad_norm_groups_.tp_replicated.push_back(out->tensor_parallel_->replicated(fqn));
    }
  }
  return out;
}

void ParallelizedModel::draw_initial_weights(const std::vector<models::InitialDraw>& draws) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> local;
  for (const auto& [fqn, p] : trained_parameters()) local.emplace(fqn, p);
  const auto layouts = shard_layouts();
  for (const auto& d : draws) {
    // Every parameter is drawn whole on the CPU, as an eager build draws it, so that the RNG
    // stream and the values are the same whatever this rank keeps: the peak is one parameter.
    auto whole = torch::empty(d.shape, torch::kFloat);
    d.draw(whole);
    auto it = local.find(d.fqn);
    if (it == local.end()) continue;  // another pipeline stage's
    auto& target = it->second;  // this rank's box of the parameter (shard_layouts), or all of it
    if (models::is_deferred(target)) target.set_data(torch::empty(target.sizes(), target.options()));
    auto piece = whole;
    if (auto layout = layouts.find(d.fqn); layout != layouts.end()) {
      for (int64_t dim = 0; dim < piece.dim(); ++dim) piece = piece.narrow(dim, layout->second.offset(size_t(dim)), target.size(dim));
    }
    target.copy_(piece);
  }
}

std::vector<models::TransformerImpl*> ParallelizedModel::part_pointers() const {
  std::vector<models::TransformerImpl*> parts;
  for (const auto& part : parts_) parts.push_back(part.ptr().get());
  return parts;
}

void ParallelizedModel::apply_pipeline(const distributed::DistContext& dist, const config::JobConfig& config,
                                       torch::Device device) {
  auto stage = pipeline::split_into_stages(*parts_.front(), config, plan_.pipeline, int(dist.mesh->local_rank("pp")));
  if (!stage.plan.warning.empty()) spdlog::warn("{}", stage.plan.warning);
  spdlog::info("{}", stage.describe());
  for (auto& more : stage.more_models) parts_.push_back(std::move(more));
  stage_of_part_ = stage.stages;
  pp_group_ = dist.mesh->group("pp");
  pp_rank_ = int(dist.mesh->local_rank("pp"));
  pp_size_ = int(dist.dims.pp);
  const auto& args = this->args();
  // The residual stream's dtype crosses: fp32 (embeddings are not autocast, and bf16 autocast
  // adds the blocks' outputs onto fp32), or FSDP's param_dtype, in which the embeddings compute.
  const auto dtype = bf16_ && dist.dims.fsdp_enabled() ? torch::kBFloat16 : torch::kFloat;
  // Under TP the stream between blocks is sequence parallel: each tp rank sends its T/tp rows to
  // the same tp rank of the next stage; under CP each rank holds T/cp of the sequence.
  pipeline::BoundarySpec boundary{{config.parallelism.pipeline_parallel_microbatch_size,
                                   config.training.seq_len / (dist.dims.tp * dist.dims.cp), args.dim},
                                  dtype, device};
  std::map<int, models::TransformerImpl*> stage_models;
  for (size_t i = 0; i < parts_.size(); ++i) stage_models[stage_of_part_[i]] = parts_[i].get();
  pipeline::StageFunctions functions{
      [this, stage_models](int stage, const torch::Tensor& input) {
        components::AutocastGuard autocast(bf16_, device_type_);
        return stage_models.at(stage)->forward(input);
      },
      [this](const torch::Tensor& logits, const torch::Tensor& labels) {
        components::AutocastGuard autocast(bf16_, device_type_);
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
  pipeline_ = std::make_unique<pipeline::PipelineRuntime>(stage.plan.shape, stage.plan.kind, stage.pp_rank, pp_group_,
                                                          std::move(boundary), std::move(functions));
}

void ParallelizedModel::apply_tensor_parallel(const distributed::DistContext& dist, const config::JobConfig& config) {
  // Sequence parallelism splits the tokens this rank holds: T / cp under context parallelism.
  tp::validate_tensor_parallel(args(), config.training.seq_len / dist.dims.cp, dist.dims.tp);
  if (plan_.tp.sublayers.empty()) {
    throw ConfigError(fmt::format("model.name {} has no tensor-parallel plan: set parallelism.tensor_parallel_degree "
                                  "to 1", config.model.name));
  }
  const bool loss_parallel = !config.parallelism.disable_loss_parallel;
  const bool async = config.parallelism.enable_async_tensor_parallel;
  if (async && args().latent_attention()) {
    // Async TP fuses the column-wise projections with the gather of the module's input; latent
    // attention's wkv_b and wq_b read the latents, not that input.
    throw ConfigError(fmt::format("parallelism.enable_async_tensor_parallel: model.name {} uses latent attention, "
                                  "whose projections async TP cannot fuse; turn it off", config.model.name));
  }
  tensor_parallel_ = std::make_unique<tp::TensorParallel>(part_pointers(), dist.mesh->group("tp"), loss_parallel, async);
  spdlog::info("TP over {} ranks: {}, sequence-parallel norms, vocab-sharded embeddings and output, loss "
               "parallel {}{}", dist.dims.tp, models::describe(plan_.tp),
               loss_parallel ? "on" : "off (logits all-gathered)",
               async ? "; async TP (collectives micro-pipelined with their matmuls)" : "");
}

void ParallelizedModel::apply_expert_parallel(const distributed::DistContext& dist) {
  expert_parallel_ = std::make_unique<ep::ExpertParallel>(part_pointers(), dist.mesh->group("ep"));
  spdlog::info("EP over {} ranks: each holds {} of {} experts per MoE layer, tokens dispatched and combined by "
               "all-to-all; FSDP shards them over efsdp {}", dist.dims.ep, args().moe.num_experts / dist.dims.ep,
               args().moe.num_experts, dist.dims.dp_shard / dist.dims.ep);
}

void ParallelizedModel::apply_context_parallel(const distributed::DistContext& dist, const config::JobConfig& config) {
  const auto method = config.parallelism.context_parallel_rotate_method;
  context_parallel_ = std::make_unique<cp::ContextParallel>(part_pointers(), dist.mesh->group("cp"), method);
  spdlog::info("CP over {} ranks: each holds 2 of {} chunks of every sequence (head-tail load balancing), ring "
               "attention with keys and values rotated by {}; FSDP shards over dp_shard {} x cp {}",
               dist.dims.cp, 2 * dist.dims.cp, config::name_of(method), dist.dims.dp_shard, dist.dims.cp);
  if (device_type_ != torch::kCPU) {
    spdlog::warn("context parallelism on {} computes its attention blocks with plain ops (memory grows with the square "
                 "of seq_len / cp per block); the flash kernel with log-sum-exp is used on the CPU only "
                 "(docs/design/context_parallel.md)", c10::DeviceTypeName(device_type_, /*lower_case=*/true));
  }
}

std::pair<torch::Tensor, torch::Tensor> ParallelizedModel::local_batch(const torch::Tensor& inputs,
                                                                        const torch::Tensor& labels) {
  if (!context_parallel_) return {inputs, labels};
  return context_parallel_->shard_batch(inputs, labels);  // (B, T / cp) each
}

torch::Tensor ParallelizedModel::rank_valid_tokens(const torch::Tensor& labels) const {
  return components::count_valid_tokens(context_parallel_ ? context_parallel_->local_part(labels) : labels);
}

void ParallelizedModel::apply_checkpointing(const config::JobConfig& config) {
  const auto& ac = config.activation_checkpoint;
  int wrapped = 0;
  for (auto& part : parts_) wrapped += parallel::apply_activation_checkpointing(*part, plan_.checkpoint_units, ac);
  if (wrapped == 0) return;
  int64_t blocks = 0;
  for (const auto& part : parts_) blocks += int64_t(part->layers->size());
  const bool selective = ac.mode == config::ActivationCheckpointMode::kSelective;
  spdlog::info("activation checkpointing {}{}: {} of {} blocks recompute their activations in backward{}",
               config::name_of(ac.mode), selective ? " " + ac.selective_ac_option : "", wrapped, blocks,
               selective && config::selective_ac(ac).op ? " (except matmul, attention and tp reduce-scatter outputs, kept)"
                                                           : "");
}

void ParallelizedModel::apply_data_parallel(const distributed::DistContext& dist, const config::JobConfig& config) {
  const auto& dims = dist.dims;
  const auto& p = config.parallelism;
  if (dims.fsdp_enabled()) {
    // Each rank draws its own shards' values (draw_initial_weights), the same on every rank.
    // Over dp_shard x cp under context parallelism (torchtitan's dp_shard_cp): the reduce-scatter
    // also sums the cp ranks' gradients, each of which saw only its chunks of the sequences.
    fsdp::MeshGroups groups{dist.mesh->group(dims.cp_enabled() ? "dp_shard_cp" : "dp_shard"),
                            dims.dp_replicate > 1 ? dist.mesh->group("dp_replicate") : nullptr};
    shard_group_ = groups.shard;
    fsdp::MixedPrecisionPolicy mp{bf16_ ? torch::kBFloat16 : torch::kFloat, config.training.mixed_precision_reduce};
    // Routed experts: over the dp_shard ranks that hold the same experts (efsdp) under EP.
    std::optional<fsdp::MeshGroups> expert_groups;
    if (dims.ep_enabled()) expert_groups = fsdp::MeshGroups{dist.mesh->group("efsdp"), groups.replicate};
    data_parallel_ = wrap_each_part([&](models::TransformerImpl& part) -> PartWrapper {
      return apply_fsdp(part, plan_.fsdp_units, groups, mp, p.fsdp_reshard_after_forward, dims.pp_enabled(),
                        expert_groups);
    });
    reduce_every_microbatch_ = p.fsdp_gradient_sync == config::GradientSync::kEveryMicrobatch;
    spdlog::info("{} over dp_shard {}{} x dp_replicate {}: params {}, reduce {}, reshard_after_forward {}, "
                 "gradient sync {}", dims.dp_replicate > 1 ? "HSDP" : "FSDP", dims.dp_shard,
                 dims.cp_enabled() ? fmt::format(" x cp {}", dims.cp) : "", dims.dp_replicate,
                 *dtype_name(mp.param_dtype), *dtype_name(mp.reduce_dtype), config::name_of(p.fsdp_reshard_after_forward),
                 config::name_of(p.fsdp_gradient_sync));
  } else if (dims.ddp_enabled()) {
    size_t buckets = 0;
    data_parallel_ = wrap_each_part([&](models::TransformerImpl& part) -> PartWrapper {
      std::vector<std::pair<std::string, torch::Tensor>> named;
      for (const auto& item : part.named_parameters()) named.emplace_back(item.key(), item.value());
      auto ddp = std::make_unique<DistributedDataParallel>(std::move(named), dist.mesh->group("dp"), p.bucket_cap_mb);
      buckets += ddp->num_buckets();
      return ddp;
    });
    spdlog::info("DDP over {} replicas, {} gradient buckets of <= {} MB", dims.dp_replicate, buckets, p.bucket_cap_mb);
  }
}

ParallelizedModel::PartWrapper ParallelizedModel::wrap_each_part(
    const std::function<PartWrapper(models::TransformerImpl&)>& wrap) {
  if (parts_.size() == 1) {
    auto wrapped = wrap(*parts_.front());
    if (pipeline_) stage_data_parallel_[stage_of_part_.at(0)] = wrapped.get();
    return wrapped;
  }
  std::vector<std::unique_ptr<DataParallel>> wrapped;
  for (auto& part : parts_) wrapped.push_back(wrap(*part));
  auto all = std::make_unique<DataParallelParts>(std::move(wrapped));
  for (size_t i = 0; i < parts_.size(); ++i) stage_data_parallel_[stage_of_part_.at(i)] = &all->part(i);
  return all;
}

torch::Tensor ParallelizedModel::forward_backward(const torch::Tensor& whole_inputs, const torch::Tensor& whole_labels,
                                                  const torch::Tensor& denominator, bool reduce_grads) {
  // The denominator counts the whole batch's tokens once (the trainer's count over dp of whole
  // sequences), so each cp rank's summed loss over its chunks divides by the same global count.
  auto [inputs, labels] = local_batch(whole_inputs, whole_labels);
  // The pipeline's last stage divides by the same global token count, so nothing is rescaled afterwards.
  if (pipeline_) return pipeline_->run(inputs, labels, denominator, reduce_grads);
  if (data_parallel_) data_parallel_->set_requires_gradient_sync(reduce_grads);
  torch::Tensor loss;
  {
    components::AutocastGuard autocast(bf16_, device_type_);
    auto logits = parts_.front()->forward(inputs);  // (B, T, vocab)
    loss = summed_loss(logits, labels) / denominator;
  }
  loss.backward();
  return loss.detach();
}

torch::Tensor ParallelizedModel::evaluate(const torch::Tensor& whole_inputs, const torch::Tensor& whole_labels) {
  torch::NoGradGuard no_grad;
  auto [inputs, labels] = local_batch(whole_inputs, whole_labels);
  // Stages forward the batch in turn; only the last stage's ranks hold a loss.
  if (pipeline_) return pipeline_->evaluate(inputs, labels);
  components::AutocastGuard autocast(bf16_, device_type_);
  auto logits = parts_.front()->forward(inputs);  // (B, T, vocab)
  return summed_loss(logits, labels);
}

double ParallelizedModel::sum_over_stages(double value) const {
  if (!pp_group_) return value;
  auto total = torch::tensor(value, torch::kDouble);
  pp_group_->all_reduce(total, distributed::ReduceOp::kSum);
  return total.item<double>();
}

torch::Tensor ParallelizedModel::summed_loss(const torch::Tensor& logits, const torch::Tensor& labels) const {
  if (tensor_parallel_ && tensor_parallel_->loss_parallel()) {
    return tensor_parallel_->vocab_parallel_cross_entropy_sum(logits, labels, components::kIgnoreIndex);  // logits (B, T, V/tp)
  }
  // Every caller drops the logits once it has the loss (training, validation, the pipeline's
  // last stage), so backward may write the gradient over them.
  return components::summed_cross_entropy(logits, labels, ops::LogitsAfterLoss::kDiscarded);  // logits (B, T, V)
}

void ParallelizedModel::finish_gradients() {
  // The norms' gradients came from this rank's sequence shard only: summed over tp they are whole.
  if (tensor_parallel_) tensor_parallel_->reduce_replicated_gradients(trained_parameters());
}

void ParallelizedModel::before_optimizer_step() { expert_balance_->update(); }

std::vector<std::pair<std::string, double>> ParallelizedModel::moe_metrics(int64_t window_steps) {
  auto out = expert_balance_->load_metrics();
  if (expert_parallel_) {
    const double steps = double(std::max<int64_t>(window_steps, 1));
    out.emplace_back("moe/a2a_bytes_per_step", double(std::exchange(a2a_bytes_, 0)) / steps);
    out.emplace_back("moe/a2a_exposed_s", std::exchange(a2a_seconds_, 0.0) / steps);
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> ParallelizedModel::saved_buffers() const {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& part : parts_) {
    for (const auto& item : part->named_buffers()) named.emplace_back(item.key(), item.value());
  }
  return named;
}

std::vector<std::pair<std::string, torch::Tensor>> ParallelizedModel::trained_parameters() const {
  if (data_parallel_) return data_parallel_->parameters_to_optimize();
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& part : parts_) {  // an interleaved schedule's stages have disjoint FQNs
    for (const auto& item : part->named_parameters()) named.emplace_back(item.key(), item.value());
  }
  return named;
}

ShardLayouts ParallelizedModel::shard_layouts() const {
  auto layouts = data_parallel_ ? data_parallel_->shard_layouts() : ShardLayouts{};
  // TP's and EP's slices (of different parameters), each sharded again by FSDP.
  ShardLayouts sliced = tensor_parallel_ ? tensor_parallel_->shard_layouts() : ShardLayouts{};
  if (expert_parallel_) sliced.insert(expert_parallel_->shard_layouts().begin(), expert_parallel_->shard_layouts().end());
  if (!sliced.empty()) layouts = tp::nest_layouts(sliced, layouts);
  return layouts;
}

StepTimes ParallelizedModel::take_step_times() {
  StepTimes times;
  // TP's collectives block inside forward and backward (and the norms' sum and the grad norm).
  if (tensor_parallel_) times.exposed_comm_seconds += tensor_parallel_->take_exposed_comm_seconds();
  if (context_parallel_) times.exposed_comm_seconds += context_parallel_->take_exposed_comm_seconds();
  if (expert_parallel_) {
    const double waited = expert_parallel_->take_exposed_comm_seconds();
    times.exposed_comm_seconds += waited;
    a2a_seconds_ += waited;
    a2a_bytes_ += expert_parallel_->take_sent_bytes();
  }
  if (data_parallel_) {
    times.exposed_comm_seconds += data_parallel_->take_exposed_comm_seconds();
    times.grad_sync_seconds = data_parallel_->take_grad_sync_seconds();
  }
  if (pipeline_) times.pipeline = pipeline_->take_times();
  return times;
}

const char* ParallelizedModel::compute_precision() const {
  if (!bf16_) return "fp32";
  // FSDP casts the parameters it gathers (its param_dtype); otherwise autocast casts per op.
  return shard_group_ ? "bf16 parameters (FSDP param_dtype), fp32 master shards" : "bf16 autocast (fp32 master weights)";
}

std::optional<PipelinePosition> ParallelizedModel::pipeline_position() const {
  if (!pipeline_) return std::nullopt;
  return PipelinePosition{pp_rank_, pp_size_, pipeline_->theoretical_bubble()};
}

}  // namespace ctitan::parallel
