#pragma once
// The model every ctitan ps process builds: seeded and initialised exactly as train::Trainer
// builds it, so that the server, each trainer and a `ctitan train` of the same config start from
// the same bytes. On the CPU: the parameters cross the wire as CPU tensors.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/config/job_config.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/models/llama/model.h"

namespace ctitan::ps {

struct SeededModel {
  std::shared_ptr<const data::Tokenizer> tokenizer;  // null without model.tokenizer_path
  models::llama::ModelArgs args;
  models::llama::Transformer model{nullptr};
  std::vector<std::pair<std::string, torch::Tensor>> named_params;  // named_parameters() order
  std::vector<torch::Tensor> params;                                // the same, without names
};

SeededModel build_seeded_model(const config::JobConfig& config);

}  // namespace ctitan::ps
