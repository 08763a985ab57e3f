#pragma once
// Qwen3-MoE's config.json keys (Qwen3MoeForCausalLM): num_experts, num_experts_per_tok,
// moe_intermediate_size, norm_topk_prob; every layer sparse.
#include <nlohmann/json.hpp>

#include <string>

#include "ctitan/models/common/model_args.h"

namespace ctitan::models::qwen3_moe {

void write_hf_config(const ModelArgs& args, nlohmann::json& config);
void read_hf_config(const nlohmann::json& config, const std::string& source, ModelArgs& args);

}  // namespace ctitan::models::qwen3_moe
