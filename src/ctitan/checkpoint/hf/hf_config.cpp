#include "ctitan/checkpoint/hf/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <type_traits>

#include "ctitan/common/dtype_names.h"
#include "ctitan/common/error.h"
#include "ctitan/common/json_fields.h"
#include "ctitan/models/common/parameter_shapes.h"
#include "ctitan/models/model_spec.h"

namespace ctitan::checkpoint::hf {
namespace {

using models::ModelArgs;

// The registry entry of config.json's model_type (absent: the default family, as older ctitan
// exports of Llama may lack it); any other architecture is refused, not loaded as if it were one.
const models::ModelSpec& spec_of(const nlohmann::json& config, const std::string& source) {
  if (!config.contains("model_type") || config["model_type"].is_null()) return models::model_spec("");
  const auto& type = config["model_type"];
  const auto* spec = type.is_string() ? models::model_spec_for_hf_type(type.get<std::string>()) : nullptr;
  if (!spec) {
    std::vector<std::string> known;
    for (const auto& s : models::model_specs()) known.push_back(s.hf.model_type);
    throw InputError(fmt::format("{}: model_type {} is not one ctitan builds (known: {})", source, type.dump(),
                                 fmt::join(known, ", ")));
  }
  return *spec;
}

// transformers 4.x writes `rope_theta` (and `rope_scaling`) at the top level; 5.x writes
// `rope_parameters: {rope_type, rope_theta}`. Plain RoPE only: a scaled variant ("llama3",
// "yarn", ...) would load and silently compute something else.
double rope_theta_of(const nlohmann::json& config, const std::string& source) {
  if (config.contains("rope_theta")) return require_positive(config, "rope_theta", source);
  if (!config.contains("rope_parameters") || !config["rope_parameters"].is_object()) {
    throw InputError(fmt::format("{}: missing key 'rope_theta' (or 'rope_parameters.rope_theta')", source));
  }
  const auto& rope = config["rope_parameters"];
  require_absent_or(rope, "rope_type", "default", source + ": rope_parameters");
  return require_positive(rope, "rope_theta", source + ": rope_parameters");
}

}  // namespace

torch::ScalarType float_dtype_from_name(const std::string& name, const std::string& source) {
  auto dtype = ctitan::dtype_from_name(name);
  if (!dtype || !c10::isFloatingType(*dtype) || *dtype == torch::kDouble) {
    throw InputError(fmt::format("{}: dtype '{}' is not one of float32, bfloat16, float16", source, name));
  }
  return *dtype;
}

nlohmann::json hf_config_json(const ModelArgs& args, torch::ScalarType dtype,
                              const std::optional<SpecialTokens>& specials) {
  const auto& spec = models::model_spec(args.family);
  nlohmann::json j = {
      {"architectures", {spec.hf.architecture}},
      {"model_type", spec.hf.model_type},
      {"hidden_size", args.dim},
      {"intermediate_size", args.ffn_hidden_dim()},
      {"num_attention_heads", args.n_heads},
      {"num_hidden_layers", args.n_layers},
      {"num_key_value_heads", args.kv_heads()},
      {"head_dim", args.head_dim()},
      {"rms_norm_eps", args.norm_eps},
      {"rope_theta", args.rope_theta},
      {"rope_scaling", nullptr},
      {"vocab_size", args.vocab_size},
      {"max_position_embeddings", args.max_seq_len},
      {"torch_dtype", *ctitan::dtype_name(dtype)},
      {"tie_word_embeddings", args.tie_word_embeddings},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"use_cache", true},
  };
  j.update(spec.hf.config_extras);
  if (spec.hf.write_config) spec.hf.write_config(args, j);
  if (specials) {
    j["bos_token_id"] = specials->bos;
    j["eos_token_id"] = specials->eos;
  }
  return j;
}

ModelArgs model_args_from_hf_config(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) throw InputError(fmt::format("{}: not a JSON object", source));
  require_absent_or(config, "hidden_act", "silu", source);
  require_absent_or(config, "attention_bias", false, source);
  require_absent_or(config, "mlp_bias", false, source);
  require_absent_or(config, "rope_scaling", nullptr, source);
  require_absent_or(config, "use_sliding_window", false, source);
  const auto& spec = spec_of(config, source);
  // The family's features (QK-norm, its default head_dim) that config.json leaves implicit.
  ModelArgs args = spec.hf_base;
  args.dim = require_size(config, "hidden_size", source);
  args.n_layers = require_size(config, "num_hidden_layers", source);
  args.n_heads = require_size(config, "num_attention_heads", source);
  args.n_kv_heads = config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()
                        ? require_size(config, "num_key_value_heads", source)
                        : args.n_heads;
  args.vocab_size = require_size(config, "vocab_size", source);
  args.norm_eps = require_positive(config, "rms_norm_eps", source);
  args.rope_theta = rope_theta_of(config, source);
  args.max_seq_len = require_size(config, "max_position_embeddings", source);
  if (config.contains("head_dim") && !config["head_dim"].is_null()) {
    args.explicit_head_dim = require_size(config, "head_dim", source);
  }
  // A head_dim equal to hidden_size / num_attention_heads is the implicit one (Llama's exports
  // write it): kept implicit, so the args equal a flavor's.
  if (args.explicit_head_dim > 0 && args.dim % args.n_heads == 0 && args.explicit_head_dim == args.dim / args.n_heads &&
      spec.hf_base.explicit_head_dim == 0) {
    args.explicit_head_dim = 0;
  }
  if ((args.explicit_head_dim == 0 && args.dim % args.n_heads != 0) || args.head_dim() % 2 != 0 ||
      args.n_heads % args.n_kv_heads != 0) {
    throw InputError(fmt::format("{}: hidden_size {} / num_attention_heads {} / num_key_value_heads {} / head_dim {} "
                                 "do not split into even heads", source, args.dim, args.n_heads, args.n_kv_heads,
                                 args.head_dim()));
  }
  // Read by import_hf; checked here so that a wrong type is named rather than thrown by nlohmann.
  if (config.contains("tie_word_embeddings") && !config["tie_word_embeddings"].is_null() &&
      !config["tie_word_embeddings"].is_boolean()) {
    throw InputError(fmt::format("{}: key 'tie_word_embeddings' must be true or false (got {})", source,
                                 config["tie_word_embeddings"].dump()));
  }
  args.ffn_dim = require_size(config, "intermediate_size", source);
  args.tie_word_embeddings = false;  // import_hf unties
  if (spec.hf.read_config) spec.hf.read_config(config, source, args);
  return args;
}

void check_model_state(const StateDict& model, const ModelArgs& args, const std::string& source) {
  auto shapes = models::parameter_shapes(args);
  shapes.merge(models::buffer_shapes(args));
  for (const auto& [name, shape] : shapes) {
    auto it = model.find(name);
    if (it == model.end()) throw InputError(fmt::format("{}: missing parameter '{}'", source, name));
    if (it->second.sizes().vec() != shape) {
      throw InputError(fmt::format("{}: parameter '{}' has shape [{}], the model needs [{}]", source, name,
                                   fmt::join(it->second.sizes(), ", "), fmt::join(shape, ", ")));
    }
  }
  for (const auto& [name, _] : model) {
    if (!shapes.count(name)) throw InputError(fmt::format("{}: unexpected parameter '{}'", source, name));
  }
}

ModelArgs infer_model_args(const StateDict& model, const ModelArgs& hyper) {
  const std::string source = "model state";
  ModelArgs args = hyper;
  const auto& emb = require_state(model, "tok_embeddings.weight");
  if (emb.dim() != 2) throw InputError(fmt::format("{}: tok_embeddings.weight is not a matrix", source));
  args.vocab_size = emb.size(0);
  args.dim = emb.size(1);
  args.n_layers = 0;
  while (model.count(fmt::format("layers.{}.attention.wq.weight", args.n_layers))) ++args.n_layers;
  if (args.n_layers == 0 || args.n_heads <= 0 ||
      require_state(model, "layers.0.attention.wq.weight").size(0) % args.n_heads != 0) {
    throw InputError(fmt::format("{}: no layers, or the query width not divisible by n_heads {}", source, args.n_heads));
  }
  const int64_t head_dim = require_state(model, "layers.0.attention.wq.weight").size(0) / args.n_heads;
  args.explicit_head_dim = args.dim % args.n_heads == 0 && head_dim == args.dim / args.n_heads ? 0 : head_dim;
  args.n_kv_heads = require_state(model, "layers.0.attention.wk.weight").size(0) / args.head_dim();
  args.qk_norm = model.count("layers.0.attention.q_norm.weight") > 0;
  args.tie_word_embeddings = model.count("output.weight") == 0;
  // The FFN rule of hyper when it gives the stored width (args equal to the flavor's), else explicit.
  if (model.count("layers.0.feed_forward.w1.weight")) {
    const int64_t ffn = model.at("layers.0.feed_forward.w1.weight").size(0);
    if (args.ffn_hidden_dim() != ffn) args.ffn_dim = ffn;
  }
  // MoE layers: the experts' count and width from the stacked weights; no saved bias, no balancing.
  const auto experts = fmt::format("layers.{}.moe.experts.w1", args.moe.n_dense_layers);
  if (args.moe.num_experts > 0 && model.count(experts) && model.at(experts).dim() == 3) {
    args.moe.num_experts = model.at(experts).size(0);
    args.moe.hidden_dim = model.at(experts).size(1);
    if (!model.count(fmt::format("layers.{}.moe.expert_bias", args.moe.n_dense_layers))) args.moe.load_balance_coeff = 0;
  }
  check_model_state(model, args, source);
  return args;
}

}  // namespace ctitan::checkpoint::hf
