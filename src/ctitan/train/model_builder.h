#pragma once
// Turns [model] and [training] config into a built, initialised model on a device.
#include <torch/torch.h>

#include "ctitan/config/job_config.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/models/common/transformer.h"

namespace ctitan::train {

// model.name's flavor (models/model_spec.h) with the config's overrides; max_seq_len covers training.seq_len. Checks
// that the tokenizer (if any) fits in the model's vocabulary and that heads divide evenly.
models::ModelArgs model_args_from_config(const config::JobConfig& config, const data::Tokenizer* tokenizer);

// Builds and initialises the model with the current default RNG, then moves it to `device`.
models::Transformer build_model(const models::ModelArgs& args, torch::Device device);

}  // namespace ctitan::train
