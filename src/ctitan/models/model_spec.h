#pragma once
// The model registry, as torchtitan's register_train_spec: one ModelSpec per family, keyed by
// `model.name`. Everything outside models/ reaches a family through this header, never by name:
// the trainer, parallel/, checkpoint/hf and the CLI work on the family-neutral decoder
// (models/common/transformer.h) and ask the spec for what differs (flavors, HF names, the
// parallelize plan).
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/models/common/model_args.h"
#include "ctitan/models/common/parallelize_plan.h"

namespace ctitan::models {

// How a family appears in a Hugging Face checkpoint.
struct HfFormat {
  std::string architecture;        // config.json "architectures"[0], e.g. "LlamaForCausalLM"
  std::string model_type;          // config.json "model_type"
  nlohmann::json config_extras;    // the family's own config.json keys, with the values ctitan supports
  // The family's config.json keys that follow the shape (experts, latent attention): written
  // from `args` after the common keys, and read back into args (one-line InputError naming the
  // file and key for a bad one). Null: none.
  std::function<void(const ModelArgs& args, nlohmann::json& config)> write_config;
  std::function<void(const nlohmann::json& config, const std::string& source, ModelArgs& args)> read_config;
  // Whether HF's model carries MoE's selection bias (DeepSeek-V3's e_score_correction_bias);
  // without, an export drops a trained bias and says so.
  bool expert_bias = false;
  // HF's q/k rows are in rotate_half order and ours in adjacent pairs (Llama, Qwen3): export and
  // import permute them. DeepSeek-V3's interleaved RoPE matches ours: no permutation.
  bool permute_rope_rows = true;
};

struct ModelSpec {
  std::string name;                                         // model.name
  std::vector<std::pair<std::string, ModelArgs>> flavors;   // model.flavor -> shape, in listing order
  // The family's features (QK-norm, RoPE θ, norm eps) that an HF config.json does not spell out:
  // the base its import starts from.
  ModelArgs hf_base;
  HfFormat hf;
  // Which modules split under tensor parallelism, shard as one FSDP unit, recompute under
  // activation checkpointing, and sit around the blocks in a pipeline split
  // (parallelize_plan.h); parallel/ applies it.
  std::function<ParallelizePlan(const ModelArgs&)> parallelize_plan;
};

// The default `model.name` (torchtitan's too).
const std::string& default_model_name();

// Every registered family, in listing order.
const std::vector<ModelSpec>& model_specs();
std::vector<std::string> model_names();

// The family named `name`; a ConfigError naming model.name and the known names otherwise.
const ModelSpec& model_spec(const std::string& name);

// The family whose HF model_type is `model_type`, or nullptr.
const ModelSpec* model_spec_for_hf_type(const std::string& model_type);

// `name`'s flavor `flavor`, with args.family set; a ConfigError naming model.flavor and the
// family's flavors otherwise.
ModelArgs model_flavor(const std::string& name, const std::string& flavor);
std::vector<std::string> flavor_names(const std::string& name);

}  // namespace ctitan::models
