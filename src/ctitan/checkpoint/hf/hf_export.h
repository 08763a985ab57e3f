#pragma once
// Writes a model as a Hugging Face LlamaForCausalLM directory: config.json, model.safetensors
// (or numbered shards plus model.safetensors.index.json), and tokenizer.model when known.
// See docs/HF_EXPORT.md for the format and the name mapping.
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "ctitan/common/state_dict.h"
#include "ctitan/models/llama/args.h"

namespace ctitan::checkpoint::hf {

struct HfExportOptions {
  torch::ScalarType dtype = torch::kFloat;     // dtype of the written tensors
  int64_t max_shard_bytes = 5'000'000'000;     // a shard holds at most this (one bigger tensor gets its own)
  std::string tokenizer_path;                  // rank file or tokenizer.json, written as both; "" = none
};

// `model`: full tensors by torchtitan FQN, exactly the parameters of `args` (checked). The
// directory appears whole or not at all (written beside it, then renamed); `out_dir` must not
// exist or be empty. Returns the number of safetensors files written.
int export_hf(const StateDict& model, const models::llama::ModelArgs& args, const HfExportOptions& options,
              const std::filesystem::path& out_dir);

}  // namespace ctitan::checkpoint::hf
