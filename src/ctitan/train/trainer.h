#pragma once
// The training job: builds tokenizer, data, model, optimizer and schedule from the config,
// then runs the step loop. One step reads top to bottom in train_step().
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctitan/checkpoint/manager.h"
#include "ctitan/common/state_dict.h"
#include "ctitan/config/job_config.h"
#include "ctitan/data/packed_loader.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/distributed/init_distributed.h"
#include "ctitan/metrics/metrics_processor.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/components/adamw.h"
#include "ctitan/components/grad_clip.h"
#include "ctitan/train/housekeeping.h"
#include "ctitan/components/lr_scheduler.h"
#include "ctitan/parallel/data_parallel.h"
#include "ctitan/parallel/pipeline/runtime.h"
#include "ctitan/parallel/tp/tensor_parallel.h"

namespace ctitan::train {

struct StepResult {
  torch::Tensor loss;       // 0-d fp32: this rank's share of the global batch's mean token loss
  torch::Tensor rank_loss;  // 0-d fp32: mean token loss of this rank's own tokens
  torch::Tensor grad_norm;  // 0-d fp32: global gradient norm before clipping
  int64_t tokens = 0;       // tokens processed by this rank in the step
};

class Trainer {
 public:
  explicit Trainer(config::JobConfig config);

  // Runs steps (current step + 1) .. training.steps.
  void train();

  // One optimizer step over the microbatches of one global batch: forward, loss and backward
  // per microbatch, then clip, optimizer step, lr schedule.
  StepResult train_step(const std::vector<data::Batch>& microbatches);

  // Accumulates the gradients of one global batch into .grad; returns the loss and rank_loss
  // of StepResult. Tensors only: nothing here waits on the host for a number that is only logged.
  std::pair<torch::Tensor, torch::Tensor> forward_backward(const std::vector<data::Batch>& microbatches);

  // Mean token loss over validation.steps batches, from the start of the validation data.
  double validate();

  models::TransformerImpl& model() { return *model_; }
  torch::Device device() const { return device_; }  // cuda:LOCAL_RANK or the CPU (training.device)
  components::AdamW& optimizer() { return *optimizer_; }
  components::LrScheduler& lr_scheduler() { return *lr_scheduler_; }
  data::PackedLoader& dataloader() { return *dataloader_; }
  int64_t step() const { return step_; }
  int64_t dp_rank() const { return dp_rank_; }
  int64_t dp_degree() const { return dp_degree_; }
  int64_t gradient_accumulation_steps() const { return grad_accum_steps_; }

  // Every stateful part by name: model, optimizer, lr_scheduler, dataloader, rng, train_state.
  std::map<std::string, StateDict> state_dicts() const;
  // For each part of state_dicts() whose tensors are shards (model and optimizer under FSDP),
  // where every local tensor sits in its global tensor. Empty parts hold whole tensors.
  std::map<std::string, ShardLayouts> shard_layouts() const;
  void load_state_dicts(const std::map<std::string, StateDict>& state);

 private:
  void train_steps();  // the step loop of train(), which adds the emergency checkpoint on exceptions
  std::vector<data::Batch> next_global_batch();
  void setup_parallelism();
  // Keeps this rank's pipeline stage of model_ and builds pipeline_ (pp > 1).
  void setup_pipeline();
  // model_, then an interleaved schedule's other stages of this rank: what TP, AC and data
  // parallelism are applied to, each part on its own.
  std::vector<models::TransformerImpl*> model_parts() const;
  // One data-parallel wrapper per model part, seen by the trainer as one (DataParallelParts).
  using PartWrapper = std::unique_ptr<parallel::DataParallel>;
  PartWrapper wrap_each_part(const std::function<PartWrapper(models::TransformerImpl&)>& wrap);
  // A ConfigError with the numbers when `ctitan estimate`'s memory walk says the step cannot fit
  // in this rank's share of the machine's memory (CPU runs without TP or AC), before anything
  // is allocated.
  void refuse_if_the_step_cannot_fit(const models::ModelArgs& args) const;
  // A ConfigError naming model.flavor when the layout needs what the model lacks (tied
  // embeddings under PP); before anything is built.
  void refuse_layouts_the_model_lacks(const models::ModelArgs& args) const;
  // Throws, naming the step, when the gradient norm is not finite: before the update for CPU
  // norms; device norms are recorded and thrown by check_no_non_finite_step() (log steps, saves).
  void stop_if_not_finite(const torch::Tensor& grad_norm);
  void check_no_non_finite_step() const;
  // Summed cross-entropy of the model's logits: over vocab-sharded logits under loss parallel.
  torch::Tensor summed_loss(const torch::Tensor& logits, const torch::Tensor& labels) const;
  // The gradient-norm groups for clipping: the FSDP shard group, and TP's group and replicated
  // parameters (by index in trained_parameters()).
  components::GradNormGroups make_grad_norm_groups() const;
  // The parameters the optimizer steps on: the model's own, or FSDP's fp32 shards.
  std::vector<std::pair<std::string, torch::Tensor>> trained_parameters() const;
  // comm.link_gbytes_per_s, or an all-gather measured now over the dp group (collective).
  double link_bytes_per_second() const;
  std::unique_ptr<data::PackedLoader> make_loader(const std::string& path, const std::string& format,
                                                  const std::string& key) const;

  config::JobConfig config_;
  std::unique_ptr<distributed::DistContext> dist_;  // null for a single process
  std::shared_ptr<distributed::Communicator> dp_group_;
  int64_t dp_rank_ = 0, dp_degree_ = 1;
  torch::Device device_;
  bool bf16_;
  std::shared_ptr<const data::Tokenizer> tokenizer_;
  models::Transformer model_{nullptr};
  // Pipeline parallelism: model_ is this rank's first stage; an interleaved schedule's other
  // stages are more_stage_models_; stage_models_ maps every stage of this rank to its model.
  std::vector<models::Transformer> more_stage_models_;
  std::map<int, models::TransformerImpl*> stage_models_;
  std::vector<int> stage_of_part_;  // model_parts()[i] is stage stage_of_part_[i]
  // Each local stage's data-parallel wrapper (in data_parallel_), for the schedule's per-stage sync.
  std::map<int, parallel::DataParallel*> stage_data_parallel_;
  std::unique_ptr<parallel::pipeline::PipelineRuntime> pipeline_;  // null without PP
  // Tensor parallelism over the mesh's tp group; null without it. After model_: destroyed first.
  std::unique_ptr<parallel::tp::TensorParallel> tensor_parallel_;
  // DDP, FSDP or HSDP; null for one process. After model_: destroyed before it.
  std::unique_ptr<parallel::DataParallel> data_parallel_;
  std::shared_ptr<distributed::Communicator> shard_group_;  // FSDP's dp_shard group, else null
  bool sync_every_microbatch_ = false;  // FSDP's fsdp_gradient_sync = every_microbatch
  std::unique_ptr<components::AdamW> optimizer_;
  components::GradNormGroups grad_norm_groups_;  // made once, after parallelism is applied
  std::unique_ptr<components::LrScheduler> lr_scheduler_;
  std::unique_ptr<data::PackedLoader> dataloader_;
  std::unique_ptr<metrics::MetricsProcessor> metrics_;
  std::unique_ptr<Housekeeper> housekeeper_;
  std::unique_ptr<checkpoint::CheckpointManager> checkpointer_;
  bool in_optimizer_update_ = false;
  torch::Tensor first_non_finite_step_;  // 0-d int64 on the device: 0, or the first step whose norm was not finite  // an exception here leaves parameters partly updated
  int64_t grad_accum_steps_ = 1;

  // Train state.
  int64_t step_ = 0;
  int64_t ntokens_seen_ = 0;
};

}  // namespace ctitan::train
