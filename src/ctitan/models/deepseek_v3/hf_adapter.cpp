#include "ctitan/models/deepseek_v3/hf_adapter.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"
#include "ctitan/common/json_fields.h"

namespace ctitan::models::deepseek_v3 {

void write_hf_config(const ModelArgs& args, nlohmann::json& config) {
  const auto& moe = args.moe;
  if (moe.score_func != RouterScore::kSigmoid) {
    throw InputError("HF export: DeepseekV3ForCausalLM scores experts by sigmoid; this model routes by softmax "
                     "(the 16B flavor), which its config cannot say");
  }
  config["head_dim"] = args.qk_rope_head_dim;  // transformers' DeepseekV3Config: the rotary width
  config["num_key_value_heads"] = args.n_heads;
  config["q_lora_rank"] = args.q_lora_rank > 0 ? nlohmann::json(args.q_lora_rank) : nlohmann::json(nullptr);
  config["kv_lora_rank"] = args.kv_lora_rank;
  config["qk_nope_head_dim"] = args.qk_nope_head_dim;
  config["qk_rope_head_dim"] = args.qk_rope_head_dim;
  config["v_head_dim"] = args.v_head_dim;
  config["n_routed_experts"] = moe.num_experts;
  config["n_shared_experts"] = moe.num_shared_experts;
  config["num_experts_per_tok"] = moe.top_k;
  config["moe_intermediate_size"] = moe.hidden_dim;
  config["n_group"] = moe.num_expert_groups > 0 ? moe.num_expert_groups : 1;
  config["topk_group"] = moe.num_limited_groups > 0 ? moe.num_limited_groups : 1;
  config["norm_topk_prob"] = moe.route_norm;
  config["routed_scaling_factor"] = moe.route_scale;
  config["first_k_dense_replace"] = moe.n_dense_layers;
}

void read_hf_config(const nlohmann::json& config, const std::string& source, ModelArgs& args) {
  require_absent_or(config, "scoring_func", "sigmoid", source);
  require_absent_or(config, "topk_method", "noaux_tc", source);
  require_absent_or(config, "rope_interleave", true, source);
  require_absent_or(config, "moe_layer_freq", 1, source);
  args.n_kv_heads = 0;  // every head its own key and value
  args.explicit_head_dim = 0;
  args.q_lora_rank = config.contains("q_lora_rank") && !config["q_lora_rank"].is_null()
                         ? require_size(config, "q_lora_rank", source) : 0;
  args.kv_lora_rank = require_size(config, "kv_lora_rank", source);
  args.qk_nope_head_dim = require_size(config, "qk_nope_head_dim", source);
  args.qk_rope_head_dim = require_size(config, "qk_rope_head_dim", source);
  args.v_head_dim = require_size(config, "v_head_dim", source);
  if (args.qk_rope_head_dim % 2 != 0) {
    throw InputError(fmt::format("{}: key 'qk_rope_head_dim' must be even (got {})", source, args.qk_rope_head_dim));
  }
  auto& moe = args.moe;
  moe.num_experts = require_size(config, "n_routed_experts", source);
  moe.num_shared_experts = config.contains("n_shared_experts") && !config["n_shared_experts"].is_null()
                               ? require_field<int64_t>(config, "n_shared_experts", source) : 0;
  moe.top_k = require_size(config, "num_experts_per_tok", source);
  moe.hidden_dim = require_size(config, "moe_intermediate_size", source);
  moe.num_expert_groups = require_size(config, "n_group", source);
  moe.num_limited_groups = require_size(config, "topk_group", source);
  moe.route_norm = optional_bool(config, "norm_topk_prob", true, source);
  moe.route_scale = require_positive(config, "routed_scaling_factor", source);
  moe.n_dense_layers = require_field<int64_t>(config, "first_k_dense_replace", source);
  if (moe.top_k > moe.num_experts || moe.num_experts % moe.num_expert_groups != 0 ||
      moe.num_limited_groups > moe.num_expert_groups ||
      moe.top_k > moe.num_limited_groups * (moe.num_experts / moe.num_expert_groups) || moe.num_shared_experts < 0 ||
      moe.n_dense_layers < 0 || moe.n_dense_layers > args.n_layers) {
    throw InputError(fmt::format("{}: n_routed_experts {}, num_experts_per_tok {}, n_group {}, topk_group {}, "
                                 "n_shared_experts {}, first_k_dense_replace {} do not make a routing", source,
                                 moe.num_experts, moe.top_k, moe.num_expert_groups, moe.num_limited_groups,
                                 moe.num_shared_experts, moe.n_dense_layers));
  }
  if (moe.num_expert_groups == 1) moe.num_expert_groups = moe.num_limited_groups = 0;  // one group: no limit
}

}  // namespace ctitan::models::deepseek_v3
