#include "ctitan/train/job_setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "ctitan/components/loss.h"
#include "ctitan/config/config_fields.h"
#include "ctitan/common/error.h"
#include "ctitan/data/documents.h"
#include "ctitan/data/mixture_stream.h"
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

namespace {

// The last component of a source's path (the folder of a glob).
std::string path_name(const std::string& path) {
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.filename().string().find_first_of("*?[") != std::string::npos) p = p.parent_path();
  if (p.filename().empty() || p.filename() == "." || p.filename() == "..") p = p.parent_path();
  return p.filename().string();
}

}  // namespace

std::vector<std::string> mixture_source_names(const std::vector<config::DatasetSource>& sources) {
  std::vector<std::string> names;
  for (const auto& s : sources) names.push_back(s.name.empty() ? path_name(s.path) : s.name);
  std::set<std::string> taken;  // explicit names (config_checks makes them unique), then each one given
  for (const auto& s : sources) {
    if (!s.name.empty()) taken.insert(s.name);
  }
  const auto derived = names;  // before any is changed
  for (size_t i = 0; i < sources.size(); ++i) {
    if (!sources[i].name.empty()) continue;
    const bool shared = names[i].empty() || taken.count(names[i]) ||
                        std::count(derived.begin(), derived.end(), names[i]) > 1;
    if (shared) {
      std::string candidate = fmt::format("{}{}", names[i], i);
      while (taken.count(candidate) || std::count(derived.begin(), derived.end(), candidate)) candidate += "_";
      names[i] = candidate;
    }
    taken.insert(names[i]);
  }
  return names;
}

namespace {

// [[training.datasets]]: each entry a stream of documents, drawn by the mixture with debug.seed.
std::unique_ptr<data::TokenStream> open_mixture(const config::JobConfig& config, const JobSeed& job) {
  const auto& sources = config.training.datasets;
  const auto names = mixture_source_names(sources);
  std::vector<data::MixtureSource> streams;
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& s = sources[i];
    const std::string label = fmt::format("training.datasets[{}] '{}'", i, s.path);
    auto files = data::list_dataset_files(s.path, s.format, fmt::format("training.datasets[{}].path", i));
    // Token files have no documents to draw: the weights would apply to 64k-token slices.
    if (files.front().format->tokens) {
      throw InputError(fmt::format("dataset error: {} holds token files; a mixture draws documents "
                                   "(text, JSONL or Parquet)", label));
    }
    // Length-prefixed fields of the normalised path (./data/web is data/web), format and column.
    const std::string path = std::filesystem::path(s.path).lexically_normal().string();
    const std::string identity = fmt::format("{}:{}{}:{}{}:{}", path.size(), path, s.format.size(), s.format,
                                             s.text_column.size(), s.text_column);
    streams.push_back({names[i], label, identity,
                       data::open_token_stream(std::move(files), job.tokenizer, label, {s.text_column}), s.weight});
  }
  return std::make_unique<data::MixtureStream>(std::move(streams), uint64_t(config.debug.seed));
}

}  // namespace

std::unique_ptr<data::PackedLoader> make_loader(const config::JobConfig& config, const JobSeed& job, DataSplit split,
                                                int64_t batch_size, int64_t dp_rank, int64_t dp_degree) {
  const auto& t = config.training;
  const auto& v = config.validation;
  const bool training = split == DataSplit::kTraining;
  if (training && !t.datasets.empty()) {
    return std::make_unique<data::PackedLoader>(open_mixture(config, job), t.seq_len, batch_size,
                                                "training.datasets (a mixture)", dp_rank, dp_degree, job.args.vocab_size);
  }
  const std::string key = training ? "training.dataset_path" : "validation.dataset_path";
  const std::string path = training || v.dataset_path.empty() ? t.dataset_path : v.dataset_path;
  const std::string format = training || v.dataset == "training" ? t.dataset : v.dataset;
  return std::make_unique<data::PackedLoader>(
      data::open_token_stream(path, format, job.tokenizer, key, {t.dataset_text_column}), t.seq_len, batch_size,
      fmt::format("{} '{}'", key, path), dp_rank, dp_degree, job.args.vocab_size);
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
