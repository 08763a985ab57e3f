#include "ctitan/checkpoint/model_io.h"

#include "ctitan/checkpoint/coordinator.h"
#include "ctitan/checkpoint/metadata.h"
#include "ctitan/checkpoint/reader.h"
#include "ctitan/checkpoint/sharded_save.h"
#include "ctitan/config/config_manager.h"

namespace ctitan::checkpoint {

StateDict load_full_model_state(const std::filesystem::path& step_dir) {
  CheckpointReader reader(step_dir);
  StateDict model;
  for (const auto& key : reader.keys("model")) model[key] = reader.read_whole("model", key);
  return model;
}

void save_model_only_checkpoint(const std::filesystem::path& step_dir, const StateDict& model,
                                const config::JobConfig& config) {
  SaveRequest request;
  request.step_dir = step_dir;
  auto name = (step_dir.has_filename() ? step_dir : step_dir.parent_path()).filename().string();
  request.step = parse_step_dir_name(name).value_or(0);
  request.model_only = true;
  request.config_toml = config::to_toml(config);
  auto coordinator = local_coordinator();
  save(*coordinator, request, local_slices({{"model", model}}, {}, 0));
}

}  // namespace ctitan::checkpoint
