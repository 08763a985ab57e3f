#include "ctitan/cli/model_source.h"

#include <fmt/format.h>

#include <filesystem>

#include "ctitan/checkpoint/hf/hf_config.h"
#include "ctitan/checkpoint/hf/hf_import.h"
#include "ctitan/checkpoint/metadata.h"
#include "ctitan/checkpoint/model_io.h"
#include "ctitan/common/error.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/train/model_builder.h"

namespace ctitan::cli {

namespace fs = std::filesystem;

// The only function that decides what a model path is: an HF export directory, or a checkpoint
// step directory (DCP layout), whose metadata carries the saving job's config: its [model]
// section gives the hyperparameters the tensors do not (heads, eps, theta). `config_path`, when
// given, takes precedence over the stored config.
ModelSource open_model_source(const std::string& path, const std::string& config_path) {
  if (checkpoint::hf::is_hf_dir(path)) {
    auto hf = checkpoint::hf::import_hf(path);
    ModelSource source{std::move(hf.model), hf.args, hf.tokenizer_path.string()};
    // A job config may name another tokenizer (e.g. an export made without one).
    if (!config_path.empty()) {
      auto job = config::load_job_config(config_path, {});
      if (!job.model.tokenizer_path.empty()) source.tokenizer_path = job.model.tokenizer_path;
    }
    return source;
  }
  if (fs::exists(fs::path(path) / checkpoint::kMetadataFile)) {
    const auto metadata = checkpoint::read_metadata(path);
    auto job = config_path.empty()
                   ? config::parse_job_config(metadata.config_toml, (fs::path(path) / checkpoint::kMetadataFile).string())
                   : config::load_job_config(config_path, {});
    ModelSource source;
    source.tokenizer_fingerprint = metadata.tokenizer_fingerprint;
    source.model = checkpoint::load_full_model_state(path);
    source.args = checkpoint::hf::infer_model_args(source.model, train::model_args_from_config(job, nullptr));
    source.tokenizer_path = job.model.tokenizer_path;
    return source;
  }
  if (!fs::exists(path)) throw InputError(fmt::format("model path {} does not exist", path));
  throw InputError(fmt::format("model path {} is neither an HF export (config.json + model.safetensors[.index.json]) "
                               "nor a checkpoint step directory ({})", path, checkpoint::kMetadataFile));
}

models::Transformer build_model_from_source(const ModelSource& source) {
  models::Transformer model(source.args);
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    item.value().copy_(require_state(source.model, item.key()).to(torch::kFloat));
  }
  for (auto& item : model->named_buffers()) item.value().copy_(require_state(source.model, item.key()));
  model->eval();
  return model;
}

}  // namespace ctitan::cli
