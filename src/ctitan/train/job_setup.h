#pragma once
// What every process that trains a config's model sets up first, one way: `ctitan train`'s
// Trainer and each `ctitan ps` process (server and trainers) start from the same RNG state,
// tokenizer, model shape, data windows and validation, so they start from the same bytes.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "ctitan/config/job_config.h"
#include "ctitan/data/packed_loader.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/models/common/model_args.h"

namespace ctitan::train {

struct JobSeed {
  std::shared_ptr<const data::Tokenizer> tokenizer;  // null without model.tokenizer_path
  models::ModelArgs args;                            // model.name's flavor with the [model] overrides
};

// Seeds the default generator with debug.seed, switches on deterministic algorithms for `device`
// when debug.deterministic asks, loads the tokenizer and resolves the model's args. The model
// built next (build_model, or build_deferred and its draws) takes its initial weights from this
// seed, the same bytes either way.
JobSeed seed_job(const config::JobConfig& config, torch::Device device);

enum class DataSplit { kTraining, kValidation };

// The names of [[training.datasets]]' sources in metrics (data_tokens/<name>), all different:
// each entry's `name`, else its path's last component (the folder of a glob), with the entry's
// index (and underscores, if need be) appended when another source has or would have it.
std::vector<std::string> mixture_source_names(const std::vector<config::DatasetSource>& sources);

// The packed loader of the training data, or of the validation data (validation.dataset_path
// and .dataset, falling back to training's), for data-parallel rank `dp_rank` of `dp_degree`:
// window i of the global order goes to rank i % dp_degree.
std::unique_ptr<data::PackedLoader> make_loader(const config::JobConfig& config, const JobSeed& job, DataSplit split,
                                                int64_t batch_size, int64_t dp_rank, int64_t dp_degree);

struct ValidationSums {
  double loss_sum = 0;  // summed token cross-entropy
  int64_t tokens = 0;   // valid (not ignored) label tokens
};

// validation.steps batches of `loader`, from where it stands, without grad: `summed_loss`
// (inputs, labels on `device` -> 0-d summed cross-entropy) of each. Sums over ranks are the
// caller's (each holds its own windows).
ValidationSums validation_sums(
    const config::JobConfig& config, data::PackedLoader& loader, torch::Device device,
    const std::function<torch::Tensor(const torch::Tensor& inputs, const torch::Tensor& labels)>& summed_loss);

}  // namespace ctitan::train
