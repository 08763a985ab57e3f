#include "ctitan/checkpoint/hf/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <type_traits>

#include "ctitan/common/dtype_names.h"
#include "ctitan/common/error.h"

namespace ctitan::checkpoint::hf {
namespace {

using models::llama::ModelArgs;

// nlohmann's get<> converts freely (true -> 1, 64.9 -> 64); a config that says either is wrong,
// so the JSON type is checked first: integers for sizes, any number for eps and theta.
template <typename T>
T require_field(const nlohmann::json& config, const std::string& key, const std::string& source) {
  if (!config.contains(key) || config[key].is_null()) {
    throw InputError(fmt::format("{}: missing key '{}'", source, key));
  }
  const auto& v = config[key];
  bool ok = std::is_integral_v<T> ? v.is_number_integer() : std::is_floating_point_v<T> ? v.is_number() : true;
  if (ok) {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  throw InputError(fmt::format("{}: key '{}' has the wrong type ({})", source, key, v.dump()));
}

// Sizes beyond this are no Llama and would overflow the shape arithmetic (vocab x dim, 4 x dim).
constexpr int64_t kMaxSize = int64_t(1) << 31;

// A size key: an integer in [1, kMaxSize].
int64_t require_size(const nlohmann::json& config, const std::string& key, const std::string& source) {
  auto v = require_field<int64_t>(config, key, source);
  if (v <= 0 || v > kMaxSize) {
    throw InputError(fmt::format("{}: key '{}' must be a positive integer up to {} (got {})", source, key, kMaxSize,
                                 config[key].dump()));
  }
  return v;
}

// rms_norm_eps, rope_theta: a finite number > 0 (eps <= 0 divides by zero on a zero row; a
// non-positive theta makes every RoPE frequency NaN or infinite).
double require_positive(const nlohmann::json& config, const std::string& key, const std::string& source) {
  auto v = require_field<double>(config, key, source);
  if (!std::isfinite(v) || v <= 0) {
    throw InputError(fmt::format("{}: key '{}' must be a finite number > 0 (got {})", source, key, config[key].dump()));
  }
  return v;
}

// A key that must hold `expected` when present: a feature ctitan's Llama does not have.
void require_absent_or(const nlohmann::json& config, const std::string& key, const nlohmann::json& expected,
                       const std::string& source) {
  if (config.contains(key) && !config[key].is_null() && config[key] != expected) {
    throw InputError(fmt::format("{}: key '{}' is {}; ctitan's Llama supports only {}", source, key,
                                 config[key].dump(), expected.dump()));
  }
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
  nlohmann::json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
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
      {"tie_word_embeddings", false},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"attention_dropout", 0.0},
      {"pretraining_tp", 1},
      {"initializer_range", 0.02},
      {"use_cache", true},
  };
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
  ModelArgs args;
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
  if (args.dim % args.n_heads != 0 || args.head_dim() % 2 != 0 || args.n_heads % args.n_kv_heads != 0) {
    throw InputError(fmt::format("{}: hidden_size {} / num_attention_heads {} / num_key_value_heads {} do not split "
                                 "into even heads", source, args.dim, args.n_heads, args.n_kv_heads));
  }
  if (config.contains("head_dim") && !config["head_dim"].is_null() &&
      require_field<int64_t>(config, "head_dim", source) != args.head_dim()) {
    throw InputError(fmt::format("{}: key 'head_dim' must be hidden_size / num_attention_heads = {}", source,
                                 args.head_dim()));
  }
  // Read by import_hf; checked here so that a wrong type is named rather than thrown by nlohmann.
  if (config.contains("tie_word_embeddings") && !config["tie_word_embeddings"].is_null() &&
      !config["tie_word_embeddings"].is_boolean()) {
    throw InputError(fmt::format("{}: key 'tie_word_embeddings' must be true or false (got {})", source,
                                 config["tie_word_embeddings"].dump()));
  }
  auto hidden = require_size(config, "intermediate_size", source);
  return with_ffn_hidden_dim(args, hidden);
}

ModelArgs with_ffn_hidden_dim(ModelArgs args, int64_t hidden) {
  // ffn_hidden_dim() rounds up to a multiple of multiple_of: with multiple_of = hidden, any
  // pre-rounding size in (0, hidden] lands exactly on hidden. A larger 8/3·dim is scaled down
  // to hidden + 0.5, which truncates to hidden whatever the rounding of the product.
  args.multiple_of = hidden;
  args.ffn_dim_multiplier.reset();
  int64_t base = 2 * (4 * args.dim) / 3;
  if (base > hidden) args.ffn_dim_multiplier = (double(hidden) + 0.5) / double(base);
  TORCH_CHECK(args.ffn_hidden_dim() == hidden, "FFN size ", hidden, " not reproduced (got ", args.ffn_hidden_dim(), ")");
  return args;
}

std::map<std::string, std::vector<int64_t>> llama_parameter_shapes(const ModelArgs& args) {
  int64_t d = args.dim, hd = args.head_dim(), ffn = args.ffn_hidden_dim();
  std::map<std::string, std::vector<int64_t>> shapes{
      {"tok_embeddings.weight", {args.vocab_size, d}},
      {"norm.weight", {d}},
      {"output.weight", {args.vocab_size, d}},
  };
  for (int64_t i = 0; i < args.n_layers; ++i) {
    auto p = fmt::format("layers.{}.", i);
    shapes[p + "attention.wq.weight"] = {args.n_heads * hd, d};
    shapes[p + "attention.wk.weight"] = {args.kv_heads() * hd, d};
    shapes[p + "attention.wv.weight"] = {args.kv_heads() * hd, d};
    shapes[p + "attention.wo.weight"] = {d, args.n_heads * hd};
    shapes[p + "feed_forward.w1.weight"] = {ffn, d};
    shapes[p + "feed_forward.w2.weight"] = {d, ffn};
    shapes[p + "feed_forward.w3.weight"] = {ffn, d};
    shapes[p + "attention_norm.weight"] = {d};
    shapes[p + "ffn_norm.weight"] = {d};
  }
  return shapes;
}

void check_llama_state(const StateDict& model, const ModelArgs& args, const std::string& source) {
  auto shapes = llama_parameter_shapes(args);
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
  if (args.n_layers == 0 || args.dim % args.n_heads != 0) {
    throw InputError(fmt::format("{}: no layers, or dim {} not divisible by n_heads {}", source, args.dim, args.n_heads));
  }
  args.n_kv_heads = require_state(model, "layers.0.attention.wk.weight").size(0) / args.head_dim();
  args = with_ffn_hidden_dim(args, require_state(model, "layers.0.feed_forward.w1.weight").size(0));
  check_llama_state(model, args, source);
  return args;
}

}  // namespace ctitan::checkpoint::hf
