#pragma once
// Reads a Hugging Face LlamaForCausalLM or Qwen3ForCausalLM directory (as export_hf writes it, or any
// checkpoint with the same names and no features ctitan lacks) back into torchtitan FQNs.
#include <torch/torch.h>

#include <filesystem>

#include "ctitan/common/state_dict.h"
#include "ctitan/models/common/model_args.h"

namespace ctitan::checkpoint::hf {

struct HfModel {
  StateDict model;                         // full tensors by torchtitan FQN, in the stored dtype
  models::ModelArgs args;           // from config.json
  torch::ScalarType dtype = torch::kFloat;  // config.json's torch_dtype
  std::filesystem::path tokenizer_path;     // dir/tokenizer.model, else dir/tokenizer.json, else empty
};

// True if `dir` looks like an HF export: config.json plus model.safetensors[.index.json].
bool is_hf_dir(const std::filesystem::path& dir);

// Inverts export_hf exactly (names, q/k row order). Every problem is an InputError naming the
// file: missing config/weights, a shard the index names but that is absent, unknown tensors,
// missing parameters, wrong shapes.
HfModel import_hf(const std::filesystem::path& dir);

}  // namespace ctitan::checkpoint::hf
