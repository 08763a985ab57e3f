#pragma once
// The model every ctitan ps process builds: seeded and initialised by train::seed_job and
// build_model (eagerly: the server and the trainers hold whole models), so that the server, each
// trainer and a `ctitan train` of the same config (which draws the same values, deferred_init.h)
// start from the same bytes. On the CPU: the parameters cross the wire as CPU
// tensors.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/config/job_config.h"
#include "ctitan/data/packed_loader.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/ps/ps_config.h"
#include "ctitan/train/job_setup.h"

namespace ctitan::ps {

// The parameter the server owns in --ps.mode dist_autograd.
inline constexpr const char* kEmbedding = "tok_embeddings.weight";

struct SeededModel {
  train::JobSeed job;  // seeded as the Trainer seeds: the same tokenizer and args
  models::Transformer model{nullptr};
  std::vector<std::pair<std::string, torch::Tensor>> named_params;  // named_parameters() order
  std::vector<torch::Tensor> params;                                // the same, without names
};

SeededModel build_seeded_model(const config::JobConfig& config);

// A trainer's loader: data-parallel rank rank-1 of the trainers, so window i of the global order
// goes to trainer i % trainers + 1 and the trainers' batches of a step are one process's batch of
// trainers x the rows (the loader's usual global order).
std::unique_ptr<data::PackedLoader> make_trainer_loader(const config::JobConfig& config, const SeededModel& model,
                                                        PsLayout layout);

}  // namespace ctitan::ps
