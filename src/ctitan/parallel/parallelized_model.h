#pragma once
// ParallelizedModel: the built model with every parallelism of the config applied from outside,
// in torchtitan's order (pipeline split, then per stage TP -> activation checkpointing ->
// FSDP/HSDP or DDP). The trainer holds one and calls the same few methods whatever the layout:
// it never asks which parallelism is on.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/components/grad_clip.h"
#include "ctitan/config/job_config.h"
#include "ctitan/distributed/init_distributed.h"
#include "ctitan/models/common/deferred_init.h"
#include "ctitan/models/common/parallelize_plan.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/parallel/cp/context_parallel.h"
#include "ctitan/parallel/data_parallel.h"
#include "ctitan/parallel/ep/expert_parallel.h"
#include "ctitan/parallel/moe_balance.h"
#include "ctitan/parallel/pipeline/runtime.h"
#include "ctitan/parallel/tp/tensor_parallel.h"

namespace ctitan::parallel {

// This rank's place in the pipeline, for the metrics.
struct PipelinePosition {
  int rank = 0;               // pp rank
  int size = 1;               // pp degree
  double bubble_theory = 0;   // the schedule's idle share in theory (schedule_sim.h)
};

// Where the step's seconds went since the last take_step_times().
struct StepTimes {
  double exposed_comm_seconds = 0;  // the trainer's thread blocked on collectives (DP, TP)
  double grad_sync_seconds = 0;     // end of backward compute until every gradient is reduced
  std::optional<pipeline::PipelineTimes> pipeline;  // with PP: busy and total seconds of the runs
};

class ParallelizedModel {
 public:
  ~ParallelizedModel();
  ParallelizedModel(const ParallelizedModel&) = delete;
  ParallelizedModel& operator=(const ParallelizedModel&) = delete;

  // The whole model's shape (every part shares it).
  const models::ModelArgs& args() const { return parts_.front()->args(); }
  // This rank's first model part (the whole model without PP).
  models::TransformerImpl& first_part() const { return *parts_.front().ptr(); }

  // One microbatch: the summed token cross-entropy / `denominator` (the global batch's valid
  // tokens), backward into the gradients; returns that loss, detached (0-d fp32; exactly 0 on a
  // pipeline rank without the last stage). Under PP one call is one schedule run over the
  // microbatch's pipeline microbatches. `reduce_grads`: this backward reduces the gradients
  // accumulated so far (the step's last microbatch, or every one under every_microbatch sync).
  torch::Tensor forward_backward(const torch::Tensor& inputs, const torch::Tensor& labels,
                                 const torch::Tensor& denominator, bool reduce_grads);
  // The valid tokens of `labels` (B, T) whose loss this rank computes: all, or its cp chunks'.
  torch::Tensor rank_valid_tokens(const torch::Tensor& labels) const;
  // Whether every microbatch should reduce its gradients (FSDP's fsdp_gradient_sync).
  bool reduce_every_microbatch() const { return reduce_every_microbatch_; }
  // Forward only, without grad: the summed token cross-entropy of one batch (inputs, labels on the
  // device), 0-d fp32; under PP only the last stage's ranks hold it and the others hold 0 until
  // sum_over_stages(); under CP each rank's sum covers its chunks (a sum over the batch group,
  // DistContext::batch_group, is the batch's).
  torch::Tensor evaluate(const torch::Tensor& inputs, const torch::Tensor& labels);
  // A host sum of evaluate()'s results, summed over the pipeline's stages (collective over pp).
  double sum_over_stages(double value) const;
  // The summed cross-entropy of logits from a part's forward (vocab-sharded under loss parallel).
  torch::Tensor summed_loss(const torch::Tensor& logits, const torch::Tensor& labels) const;

  // After the step's last backward, before clipping: the gradients TP left partial are whole.
  void finish_gradients();
  // After finish_gradients, before the optimizer step, on every rank at the same step: the model's
  // own housekeeping of the step (MoE load balancing moves each expert's selection bias from the
  // step's token counts, summed over the ranks that share the experts). Nothing for a dense model.
  void before_optimizer_step();
  // The tensors the optimizer steps on, by FQN: the parameters, or FSDP's fp32 shards of them.
  std::vector<std::pair<std::string, torch::Tensor>> trained_parameters() const;
  // The model's saved state that is not trained (models::buffer_shapes: MoE expert_bias), whole
  // on every rank that holds its layer, by FQN.
  std::vector<std::pair<std::string, torch::Tensor>> saved_buffers() const;
  // The MoE layers' load and bias ranges at the last step (ExpertBalance::load_metrics), and under
  // expert parallelism the all-to-all bytes this rank sent and the seconds it waited on them, per
  // step since the last call (moe/a2a_bytes_per_step, moe/a2a_exposed_s), for the metrics.
  std::vector<std::pair<std::string, double>> moe_metrics(int64_t window_steps);
  // The groups the gradient norm spans, aligned with trained_parameters().
  const components::GradNormGroups& grad_norm_groups() const { return grad_norm_groups_; }
  // Where each trained tensor sits in its global tensor (FSDP shards, TP slices, both nested);
  // empty when every tensor is whole.
  ShardLayouts shard_layouts() const;
  StepTimes take_step_times();
  // How the step computes: "fp32", FSDP's bf16 parameters over fp32 master shards, or bf16
  // autocast over fp32 weights.
  const char* compute_precision() const;
  // None without PP.
  std::optional<PipelinePosition> pipeline_position() const;
  // How many ranks compute one data-parallel rank's batch together (a tp group, a pipeline's
  // stages): throughput per device divides the batch's tokens by it, as torchtitan does.
  int64_t ranks_per_batch() const { return ranks_per_batch_; }

 private:
  friend std::unique_ptr<ParallelizedModel> parallelize(models::DeferredModel model, const distributed::DistContext& dist,
                                                        const config::JobConfig& config, torch::Device device);
  ParallelizedModel() = default;
  void apply_pipeline(const distributed::DistContext& dist, const config::JobConfig& config, torch::Device device);
  void apply_tensor_parallel(const distributed::DistContext& dist, const config::JobConfig& config);
  void apply_context_parallel(const distributed::DistContext& dist, const config::JobConfig& config);
  void apply_expert_parallel(const distributed::DistContext& dist);
  // inputs, labels (B, T) -> what this rank computes: its context-parallel chunks, or all of them.
  std::pair<torch::Tensor, torch::Tensor> local_batch(const torch::Tensor& inputs, const torch::Tensor& labels);
  void apply_checkpointing(const config::JobConfig& config);
  // Gives this rank's parameters (whole, or their parts) their initial values: every draw is
  // made in order, what this rank does not keep is dropped.
  void draw_initial_weights(const std::vector<models::InitialDraw>& draws);
  void apply_data_parallel(const distributed::DistContext& dist, const config::JobConfig& config);
  // One data-parallel wrapper per model part, seen as one (DataParallelParts).
  using PartWrapper = std::unique_ptr<DataParallel>;
  PartWrapper wrap_each_part(const std::function<PartWrapper(models::TransformerImpl&)>& wrap);
  std::vector<models::TransformerImpl*> part_pointers() const;

  bool bf16_ = false;
  torch::DeviceType device_type_ = torch::kCPU;
  // This rank's model parts: the whole model, or its pipeline stages (one, or an interleaved
  // schedule's several, stage_of_part_[i] being part i's stage).
  std::vector<models::Transformer> parts_;
  // The family's plan (ModelSpec::parallelize_plan): which modules split, shard and recompute how.
  models::ParallelizePlan plan_;
  std::vector<int> stage_of_part_;
  // Each local stage's data-parallel wrapper (inside data_parallel_), for the schedule's per-stage sync.
  std::map<int, DataParallel*> stage_data_parallel_;
  std::shared_ptr<distributed::Communicator> pp_group_;  // null without PP
  // Null without PP. Its stage functions reach stage_data_parallel_'s wrappers: it must not
  // outlive data_parallel_ in a call (it runs only inside forward_backward and evaluate).
  std::unique_ptr<pipeline::PipelineRuntime> pipeline_;
  // Destroyed before the parts they hook (members are destroyed in reverse order).
  std::unique_ptr<tp::TensorParallel> tensor_parallel_;  // null without TP
  std::unique_ptr<cp::ContextParallel> context_parallel_;  // null without CP
  std::unique_ptr<ep::ExpertParallel> expert_parallel_;    // null without EP
  int64_t a2a_bytes_ = 0;                                  // EP's sent bytes since the last moe_metrics()
  double a2a_seconds_ = 0;                                 // and the seconds its all-to-alls blocked this rank
  std::unique_ptr<DataParallel> data_parallel_;          // DDP, FSDP or HSDP; null without them
  std::unique_ptr<ExpertBalance> expert_balance_;        // empty for a dense model
  std::shared_ptr<distributed::Communicator> shard_group_;  // FSDP's dp_shard group, else null
  bool reduce_every_microbatch_ = false;
  int64_t ranks_per_batch_ = 1;
  int pp_rank_ = 0, pp_size_ = 1;
  components::GradNormGroups grad_norm_groups_;
};

// A ConfigError naming model.flavor when the layout needs what the model lacks (tied embeddings
// under PP); called before the model is built.
void refuse_layouts_the_model_lacks(const models::ModelArgs& args, const distributed::ParallelDims& dims,
                                    const config::JobConfig& config);

// Applies the config's parallelism to `model` (built without its weights, the same on every rank
// from one seed) on `dist`'s mesh, then draws the weights this rank keeps: the values of an eager
// build's init_weights, bit for bit, without the whole model on any rank that shards it. A world
// of one gets activation checkpointing only.
std::unique_ptr<ParallelizedModel> parallelize(models::DeferredModel model, const distributed::DistContext& dist,
                                               const config::JobConfig& config, torch::Device device);

}  // namespace ctitan::parallel
