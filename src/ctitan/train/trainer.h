#pragma once
// The training job: builds tokenizer, data, model, optimizer and schedule from the config,
// then runs the step loop. One step reads top to bottom in train_step().
#include <torch/torch.h>

#include <chrono>
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
#include "ctitan/train/job_setup.h"
#include "ctitan/components/lr_scheduler.h"
#include "ctitan/parallel/parallelized_model.h"

namespace ctitan::train {

struct StepResult {
  torch::Tensor loss;       // 0-d fp32: this rank's share of the global batch's mean token loss
  torch::Tensor rank_loss;  // 0-d fp32: mean token loss of this rank's own tokens
  torch::Tensor grad_norm;  // 0-d fp32: global gradient norm before clipping
  int64_t tokens = 0;       // tokens processed by this rank in the step
};

class Trainer : public checkpoint::Stateful {
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

  // This rank's model: the whole one, or its first pipeline stage.
  models::TransformerImpl& model() { return model_->first_part(); }
  torch::Device device() const { return device_; }  // cuda:LOCAL_RANK or the CPU (training.device)
  components::AdamW& optimizer() { return *optimizer_; }
  components::LrScheduler& lr_scheduler() { return *lr_scheduler_; }
  data::PackedLoader& dataloader() { return *dataloader_; }
  int64_t step() const { return step_; }
  int64_t dp_rank() const { return dp_rank_; }
  int64_t dp_degree() const { return dp_degree_; }
  int64_t gradient_accumulation_steps() const { return grad_accum_steps_; }

  // Every stateful part by name: model, optimizer, lr_scheduler, dataloader, rng, train_state.
  std::map<std::string, StateDict> state_dicts() const override;
  // For each part of state_dicts() whose tensors are shards (model and optimizer under FSDP),
  // where every local tensor sits in its global tensor. Empty parts hold whole tensors.
  std::map<std::string, ShardLayouts> shard_layouts() const override;
  void load_state_dicts(const std::map<std::string, StateDict>& state) override;

 private:
  void train_steps();  // the step loop of train(), which adds the emergency checkpoint on exceptions
  std::vector<data::Batch> next_global_batch();
  // One line: the bytes of this rank's parameters against the whole model's, and the most memory
  // the set-up held at once.
  void log_setup_memory() const;
  // A ConfigError with the numbers, before anything is allocated, when the step cannot fit in this
  // rank's memory: by a floor any layout must hold (estimate/memory_floor.h), on every device; and
  // by `ctitan estimate`'s memory walk where it follows the step (CPU runs without TP, PP or AC).
  void refuse_if_the_step_cannot_fit(const models::ModelArgs& args) const;
  // Throws, naming the step, when the gradient norm is not finite: before the update for CPU
  // norms; device norms are recorded and thrown by check_no_non_finite_step() (log steps, saves).
  void stop_if_not_finite(const torch::Tensor& grad_norm);
  void check_no_non_finite_step() const;
  // comm.link_gbytes_per_s, or an all-gather measured now over the dp group, or the world when
  // there is no data parallelism (collective).
  double link_bytes_per_second() const;

  config::JobConfig config_;
  std::unique_ptr<distributed::DistContext> dist_;  // a single process is a world of one
  std::shared_ptr<distributed::Communicator> dp_group_;
  int64_t dp_rank_ = 0, dp_degree_ = 1;
  torch::Device device_;
  bool bf16_;
  JobSeed job_;  // tokenizer and model args
  // The model with the config's parallelism applied: what every step trains.
  std::unique_ptr<parallel::ParallelizedModel> model_;
  std::unique_ptr<components::AdamW> optimizer_;
  std::unique_ptr<components::LrScheduler> lr_scheduler_;
  std::unique_ptr<data::PackedLoader> dataloader_;
  std::unique_ptr<metrics::MetricsProcessor> metrics_;
  std::unique_ptr<Housekeeper> housekeeper_;
  std::unique_ptr<checkpoint::CheckpointManager> checkpointer_;
  bool in_optimizer_update_ = false;  // an exception here leaves parameters partly updated
  torch::Tensor first_non_finite_step_;  // 0-d int64 on the device: 0, or the first step whose norm was not finite
  int64_t grad_accum_steps_ = 1;

  // Train state.
  int64_t step_ = 0;
  int64_t ntokens_seen_ = 0;
};

}  // namespace ctitan::train
