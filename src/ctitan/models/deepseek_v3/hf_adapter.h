#pragma once
// DeepSeek-V3's config.json keys (DeepseekV3ForCausalLM): the latent attention's ranks and head
// widths, the experts (n_routed_experts, n_shared_experts, num_experts_per_tok,
// moe_intermediate_size), the routing (n_group, topk_group, norm_topk_prob,
// routed_scaling_factor; always sigmoid, selection bias e_score_correction_bias) and
// first_k_dense_replace.
#include <nlohmann/json.hpp>

#include <string>

#include "ctitan/models/common/model_args.h"

namespace ctitan::models::deepseek_v3 {

// InputError for a model HF's DeepseekV3 cannot express (softmax routing, the 16B flavor).
void write_hf_config(const ModelArgs& args, nlohmann::json& config);
void read_hf_config(const nlohmann::json& config, const std::string& source, ModelArgs& args);

}  // namespace ctitan::models::deepseek_v3
