#include "ctitan/train/job_setup.h"

#include <fmt/format.h>

#include "ctitan/components/loss.h"
#include "ctitan/config/config_fields.h"
#include "ctitan/data/token_stream.h"
#include "ctitan/train/determinism.h"
#include "ctitan/train/model_builder.h"

namespace ctitan::train {

JobSeed seed_job(const config::JobConfig& config, torch::Device device) {
  torch::manual_seed(uint64_t(config.debug.seed));
  if (config.debug.deterministic) use_deterministic_algorithms(device);
  JobSeed job;
  if (!config.model.tokenizer_path.empty()) {
    job.tokenizer = std::make_shared<data::Tokenizer>(data::Tokenizer::load(config.model.tokenizer_path));
  }
  job.args = model_args_from_config(config, job.tokenizer.get());
  return job;
}

std::unique_ptr<data::PackedLoader> make_loader(const config::JobConfig& config, const JobSeed& job, DataSplit split,
                                                int64_t batch_size, int64_t dp_rank, int64_t dp_degree) {
  const auto& t = config.training;
  const auto& v = config.validation;
  const bool training = split == DataSplit::kTraining;
  const std::string key = training ? "training.dataset_path" : "validation.dataset_path";
  const std::string path = training || v.dataset_path.empty() ? t.dataset_path : v.dataset_path;
  const std::string format =
      config::name_of(training || v.dataset == config::DatasetFormat::kAsTraining ? t.dataset : v.dataset);
  return std::make_unique<data::PackedLoader>(data::open_token_stream(path, format, job.tokenizer, key), t.seq_len,
                                              batch_size, fmt::format("{} '{}'", key, path), dp_rank, dp_degree,
                                              job.args.vocab_size);
}

ValidationSums validation_sums(
    const config::JobConfig& config, data::PackedLoader& loader, torch::Device device,
    const std::function<torch::Tensor(const torch::Tensor& inputs, const torch::Tensor& labels)>& summed_loss) {
  torch::NoGradGuard no_grad;
  ValidationSums sums;
  for (int64_t i = 0; i < config.validation.steps; ++i) {
    auto batch = loader.next();  // inputs, labels: (B, T)
    sums.loss_sum += summed_loss(batch.inputs.to(device), batch.labels.to(device)).item<double>();
    sums.tokens += components::count_valid_tokens(batch.labels).item<int64_t>();
  }
  return sums;
}

}  // namespace ctitan::train
