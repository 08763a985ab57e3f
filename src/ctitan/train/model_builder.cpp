#include "ctitan/train/model_builder.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"
#include "ctitan/models/model_spec.h"

namespace ctitan::train {

namespace {

// MoE overrides on a MoE flavor only, and a routing that can be computed.
void check_moe_overrides(const config::JobConfig& config, models::ModelArgs& args) {
  const auto& m = config.model;
  if (args.moe.num_experts == 0) {
    for (auto [key, set] : {std::pair{"num_experts", m.num_experts > 0}, {"top_k", m.top_k > 0},
                            {"moe_hidden_dim", m.moe_hidden_dim > 0}, {"load_balance_coeff", m.load_balance_coeff >= 0},
                            {"capacity_factor", m.capacity_factor >= 0}, {"aux_loss_alpha", m.aux_loss_alpha >= 0}}) {
      if (set) {
        throw ConfigError(fmt::format("model.{} applies to a mixture-of-experts model; model.name {} is dense", key,
                                      config.model.name));
      }
    }
    return;
  }
  if (m.num_experts) args.moe.num_experts = m.num_experts;
  if (m.top_k) args.moe.top_k = m.top_k;
  if (m.moe_hidden_dim) args.moe.hidden_dim = m.moe_hidden_dim;
  if (m.load_balance_coeff >= 0) args.moe.load_balance_coeff = m.load_balance_coeff;
  if (m.capacity_factor >= 0) args.moe.capacity_factor = m.capacity_factor;
  if (m.aux_loss_alpha >= 0) args.moe.aux_loss_alpha = m.aux_loss_alpha;
  if (args.moe.top_k > args.moe.num_experts) {
    throw ConfigError(fmt::format("model.top_k {} is more than model.num_experts {}: each token needs top_k distinct "
                                  "experts", args.moe.top_k, args.moe.num_experts));
  }
  if (args.moe.num_expert_groups > 0 && args.moe.num_experts % args.moe.num_expert_groups != 0) {
    throw ConfigError(fmt::format("model.num_experts {} does not split into the flavor's {} expert groups",
                                  args.moe.num_experts, args.moe.num_expert_groups));
  }
  if (args.moe.num_expert_groups > 0 &&
      args.moe.top_k > args.moe.num_limited_groups * (args.moe.num_experts / args.moe.num_expert_groups)) {
    throw ConfigError(fmt::format("model.top_k {} is more than the {} experts of the flavor's {} best groups", args.moe.top_k,
                                  args.moe.num_limited_groups * (args.moe.num_experts / args.moe.num_expert_groups),
                                  args.moe.num_limited_groups));
  }
}

}  // namespace

models::ModelArgs model_args_from_config(const config::JobConfig& config, const data::Tokenizer* tokenizer) {
  auto args = models::model_flavor(config.model.name, config.model.flavor);
  const auto& m = config.model;
  if (m.dim) args.dim = m.dim;
  if (m.n_layers) args.n_layers = m.n_layers;
  if (m.n_heads) args.n_heads = m.n_heads;
  if (m.n_kv_heads) args.n_kv_heads = m.n_kv_heads;
  if (m.vocab_size) args.vocab_size = m.vocab_size;
  if (m.head_dim) args.explicit_head_dim = m.head_dim;
  if (m.hidden_dim) args.ffn_dim = m.hidden_dim;
  if (m.rope_theta > 0) args.rope_theta = m.rope_theta;
  if (m.norm_eps > 0) args.norm_eps = m.norm_eps;
  if (args.latent_attention() && config.training.seq_len > args.max_seq_len) {
    // DeepSeek extends its context with YaRN (and the attention scale's mscale) past the flavor's
    // positions, as torchtitan does; without it longer sequences would train another model.
    throw ConfigError(fmt::format("training.seq_len {} is beyond model.flavor {}'s {} positions: {} extends them with "
                                  "YaRN, which ctitan does not build", config.training.seq_len, config.model.flavor,
                                  args.max_seq_len, config.model.name));
  }
  args.max_seq_len = std::max(args.max_seq_len, config.training.seq_len);
  check_moe_overrides(config, args);

  if (args.explicit_head_dim == 0 && (args.dim % args.n_heads != 0 || args.head_dim() % 2 != 0)) {
    throw ConfigError(fmt::format("model.dim {} must be a multiple of 2 * model.n_heads {}", args.dim, args.n_heads));
  }
  if (args.head_dim() % 2 != 0) {  // RoPE rotates pairs
    throw ConfigError(fmt::format("model.head_dim {} must be even", args.head_dim()));
  }
  if (args.n_heads % args.kv_heads() != 0) {
    throw ConfigError(fmt::format("model.n_heads {} must be a multiple of model.n_kv_heads {}", args.n_heads,
                                  args.kv_heads()));
  }
  if (tokenizer && tokenizer->vocab_size() > args.vocab_size) {
    throw ConfigError(fmt::format("model.vocab_size {} is smaller than the vocabulary of {} ({} tokens)",
                                  args.vocab_size, config.model.tokenizer_path, tokenizer->vocab_size()));
  }
  return args;
}

models::Transformer build_model(const models::ModelArgs& args, torch::Device device) {
  models::Transformer model(args);
  models::init_weights(*model);
  model->to(device);
  return model;
}

}  // namespace ctitan::train
