#pragma once
// Model-only access to checkpoints, for export/import and generation: whole tensors in, whole
// tensors out, whatever layout saved them.
#include <filesystem>

#include "ctitan/common/state_dict.h"
#include "ctitan/config/job_config.h"

namespace ctitan::checkpoint {

// The full (unsharded) model tensors by fully-qualified name from a valid step directory,
// whatever layout saved it, in the saved dtype. Throws InputError naming the file on corruption.
StateDict load_full_model_state(const std::filesystem::path& step_dir);

// Writes a model-only, single-process ("seed") checkpoint step directory, valid for
// checkpoint.initial_load_path. The step is taken from a "step-N" directory name, else 0.
void save_model_only_checkpoint(const std::filesystem::path& step_dir, const StateDict& model,
                                const config::JobConfig& config);

}  // namespace ctitan::checkpoint
