#include "ctitan/ps/model_setup.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"
#include "ctitan/train/model_builder.h"

namespace ctitan::ps {

SeededModel build_seeded_model(const config::JobConfig& config) {
  if (config.training.device == config::DeviceChoice::kCuda) {
    throw ConfigError("training.device = cuda: the parameter server (ctitan ps) trains on the CPU only");
  }
  SeededModel out;
  out.job = train::seed_job(config, torch::Device(torch::kCPU));
  out.model = train::build_model(out.job.args, torch::Device(torch::kCPU));
  for (const auto& item : out.model->named_parameters()) {
    out.named_params.emplace_back(item.key(), item.value());
    out.params.push_back(item.value());
  }
  return out;
}

std::unique_ptr<data::PackedLoader> make_trainer_loader(const config::JobConfig& config, const SeededModel& model,
                                                        PsLayout layout) {
  return train::make_loader(config, model.job, train::DataSplit::kTraining, config.training.local_batch_size,
                            layout.rank - 1, layout.trainers());
}

}  // namespace ctitan::ps
