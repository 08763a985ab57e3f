#pragma once
// Model shape <-> HF `config.json`, for every family of the registry (models/model_spec.h:
// LlamaForCausalLM, Qwen3ForCausalLM), and checks of a state dict against a shape.
#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/models/common/model_args.h"

namespace ctitan::checkpoint::hf {

// Special token ids written to config.json when the export ships a tokenizer.
struct SpecialTokens {
  int64_t bos = 0, eos = 0;
};

// config.json for args.family's HF architecture with `args`, tensors stored as `dtype`.
nlohmann::json hf_config_json(const models::ModelArgs& args, torch::ScalarType dtype,
                              const std::optional<SpecialTokens>& specials);

// Reads the fields hf_config_json writes (the ones the forward needs), for the family whose HF
// model_type the config names. A missing or wrong field, another model_type, or a feature ctitan
// lacks (biases, rope_scaling, another hidden_act, sliding windows) is an InputError naming
// `source` and the key. The result is untied (import_hf copies a tied embedding into the head).
models::ModelArgs model_args_from_hf_config(const nlohmann::json& config, const std::string& source);

// "float32" | "bfloat16" | "float16" as config.json's torch_dtype and --dtype spell them; anything
// else is an InputError naming `source`.
torch::ScalarType float_dtype_from_name(const std::string& name, const std::string& source);

// Model args whose shapes are read off `model`'s tensors (dim, vocab, layers, head and kv head
// widths, FFN size, QK-norm, tied head); what tensors cannot tell (family, n_heads, norm_eps,
// rope_theta, max_seq_len) comes from `hyper`. Every tensor is then checked against
// models::parameter_shapes; InputError on mismatch.
models::ModelArgs infer_model_args(const StateDict& model, const models::ModelArgs& hyper);

// Throws InputError naming `source` unless `model` has exactly the parameters of `args`, each
// with its shape.
void check_model_state(const StateDict& model, const models::ModelArgs& args, const std::string& source);

}  // namespace ctitan::checkpoint::hf
