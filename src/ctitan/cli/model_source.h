#pragma once
// Opening a model for `checkpoint export` and `generate`: the one place that knows which kinds
// of model path exist (today an HF export directory; the DCP step directory is wired in by the
// checkpoint integration, see open_model_source in model_source.cpp).
#include <string>

#include "ctitan/common/state_dict.h"
#include "ctitan/models/common/model_args.h"
#include "ctitan/models/common/transformer.h"

namespace ctitan::cli {

struct ModelSource {
  StateDict model;              // full tensors by torchtitan FQN
  models::ModelArgs args;
  std::string tokenizer_path;   // "" when the source names none
  // A checkpoint step directory's Metadata::tokenizer_fingerprint: the vocabulary it was trained
  // with ("" when it recorded none).
  std::string tokenizer_fingerprint;
};

// `path`: a model directory. `config_path`: an optional TOML job config, for the hyperparameters
// (n_heads, norm_eps, rope_theta, max_seq_len) and tokenizer that a training checkpoint does
// not carry; an HF export carries its own. Unknown paths are an InputError naming the path.
ModelSource open_model_source(const std::string& path, const std::string& config_path);

// An fp32 model holding `source`'s weights, in eval use (no grad needed).
models::Transformer build_model_from_source(const ModelSource& source);

}  // namespace ctitan::cli
