#pragma once
// Model shape <-> HF `config.json` (LlamaForCausalLM), and the shape of every Llama parameter.
#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/models/llama/args.h"

namespace ctitan::checkpoint::hf {

// Special token ids written to config.json when the export ships a tokenizer.
struct SpecialTokens {
  int64_t bos = 0, eos = 0;
};

// config.json for a LlamaForCausalLM with `args`, tensors stored as `dtype`.
nlohmann::json hf_config_json(const models::llama::ModelArgs& args, torch::ScalarType dtype,
                              const std::optional<SpecialTokens>& specials);

// Reads the fields hf_config_json writes (the ones a Llama forward needs). A missing or wrong
// field, or a feature ctitan's Llama lacks (biases, rope_scaling, another hidden_act), is an
// InputError naming `source` and the key.
models::llama::ModelArgs model_args_from_hf_config(const nlohmann::json& config, const std::string& source);

// "float32" | "bfloat16" | "float16" as config.json's torch_dtype and --dtype spell them; anything
// else is an InputError naming `source`.
torch::ScalarType float_dtype_from_name(const std::string& name, const std::string& source);

// `args` with multiple_of / ffn_dim_multiplier chosen so that ffn_hidden_dim() == hidden: HF
// configs give the FFN size directly, ModelArgs derives it.
models::llama::ModelArgs with_ffn_hidden_dim(models::llama::ModelArgs args, int64_t hidden);

// Every parameter of a Llama with `args`, by torchtitan FQN, with its shape.
std::map<std::string, std::vector<int64_t>> llama_parameter_shapes(const models::llama::ModelArgs& args);

// Model args whose shapes are read off `model`'s tensors (dim, vocab, layers, kv heads, FFN
// size); what tensors cannot tell (n_heads, norm_eps, rope_theta, max_seq_len) comes from
// `hyper`. Every tensor is then checked against llama_parameter_shapes; InputError on mismatch.
models::llama::ModelArgs infer_model_args(const StateDict& model, const models::llama::ModelArgs& hyper);

// Throws InputError naming `source` unless `model` has exactly the parameters of `args`, each
// with its shape.
void check_llama_state(const StateDict& model, const models::llama::ModelArgs& args, const std::string& source);

}  // namespace ctitan::checkpoint::hf
