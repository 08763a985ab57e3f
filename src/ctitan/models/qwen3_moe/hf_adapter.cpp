#include "ctitan/models/qwen3_moe/hf_adapter.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"
#include "ctitan/common/json_fields.h"

namespace ctitan::models::qwen3_moe {

void write_hf_config(const ModelArgs& args, nlohmann::json& config) {
  config["num_experts"] = args.moe.num_experts;
  config["num_experts_per_tok"] = args.moe.top_k;
  config["moe_intermediate_size"] = args.moe.hidden_dim;
  config["norm_topk_prob"] = args.moe.route_norm;
}

void read_hf_config(const nlohmann::json& config, const std::string& source, ModelArgs& args) {
  auto& moe = args.moe;
  require_absent_or(config, "decoder_sparse_step", 1, source);
  require_absent_or(config, "mlp_only_layers", nlohmann::json::array(), source);
  // Qwen's published configs say num_experts; transformers 5 saves num_local_experts.
  moe.num_experts = require_size(config, config.contains("num_local_experts") && !config.contains("num_experts")
                                             ? "num_local_experts" : "num_experts", source);
  moe.top_k = require_size(config, "num_experts_per_tok", source);
  moe.hidden_dim = require_size(config, "moe_intermediate_size", source);
  if (moe.top_k > moe.num_experts) {
    throw InputError(fmt::format("{}: key 'num_experts_per_tok' ({}) is more than num_experts ({})", source, moe.top_k,
                                 moe.num_experts));
  }
  moe.route_norm = optional_bool(config, "norm_topk_prob", false, source);  // transformers' default
}

}  // namespace ctitan::models::qwen3_moe
