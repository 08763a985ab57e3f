#include "ctitan/ps/model_setup.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"
#include "ctitan/data/token_stream.h"
#include "ctitan/train/determinism.h"
#include "ctitan/train/model_builder.h"

namespace ctitan::ps {

SeededModel build_seeded_model(const config::JobConfig& config) {
  // The Trainer's order: seed, deterministic switch, tokenizer, args, build (init uses the RNG).
  if (config.training.device == config::DeviceChoice::kCuda) {
    throw ConfigError("training.device = cuda: the parameter server (ctitan ps) trains on the CPU only");
  }
  torch::manual_seed(uint64_t(config.debug.seed));
  if (config.debug.deterministic) train::use_deterministic_algorithms(torch::Device(torch::kCPU));
  SeededModel out;
  if (!config.model.tokenizer_path.empty()) {
    out.tokenizer = std::make_shared<data::Tokenizer>(data::Tokenizer::load(config.model.tokenizer_path));
  }
  out.args = train::model_args_from_config(config, out.tokenizer.get());
  out.model = train::build_model(out.args, torch::Device(torch::kCPU));
  for (const auto& item : out.model->named_parameters()) {
    out.named_params.emplace_back(item.key(), item.value());
    out.params.push_back(item.value());
  }
  return out;
}

std::unique_ptr<data::PackedLoader> make_trainer_loader(const config::JobConfig& config, const SeededModel& model,
                                                        PsLayout layout) {
  const auto& t = config.training;
  return std::make_unique<data::PackedLoader>(
      data::open_token_stream(t.dataset_path, t.dataset, model.tokenizer, "training.dataset_path"), t.seq_len,
      t.local_batch_size, fmt::format("training.dataset_path '{}'", t.dataset_path), layout.rank - 1,
      layout.trainers(), model.args.vocab_size);
}

}  // namespace ctitan::ps
