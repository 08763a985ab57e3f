#include "ctitan/checkpoint/hf/hf_names.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <regex>
#include <utility>

#include "ctitan/common/error.h"
#include "ctitan/models/model_spec.h"

namespace ctitan::checkpoint::hf {
namespace {

// Per-layer parameter suffixes: torchtitan's, then HF's (w1 = gate, w3 = up, w2 = down).
constexpr std::array<std::pair<const char*, const char*>, 15> kLayerNames{{
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"attention.q_norm.weight", "self_attn.q_norm.weight"},  // Qwen3's QK-norm
    {"attention.k_norm.weight", "self_attn.k_norm.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"moe.router.gate.weight", "mlp.gate.weight"},  // the router's (E, dim)
    {"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},  // DeepSeek's naming
    {"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
    {"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
    {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
}};

// Latent attention's (DeepSeek-V3): checked before kLayerNames, whose attention.q_norm is Qwen3's
// QK-norm; here it is the query latent's norm.
constexpr std::array<std::pair<const char*, const char*>, 8> kLatentNames{{
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wq_a.weight", "self_attn.q_a_proj.weight"},
    {"attention.q_norm.weight", "self_attn.q_a_layernorm.weight"},
    {"attention.wq_b.weight", "self_attn.q_b_proj.weight"},
    {"attention.wkv_a.weight", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attention.kv_norm.weight", "self_attn.kv_a_layernorm.weight"},
    {"attention.wkv_b.weight", "self_attn.kv_b_proj.weight"},
    {"moe.expert_bias", "mlp.gate.e_score_correction_bias"},  // the selection bias (a buffer here)
}};

constexpr std::array<std::pair<const char*, const char*>, 3> kTopNames{{
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
}};

// Maps `name` from column `from` of the tables to column `to`; empty if it is not there.
std::string translate(const std::string& name, bool to_hf, bool latent) {
  for (const auto& names : kTopNames) {
    if (name == (to_hf ? names.first : names.second)) return to_hf ? names.second : names.first;
  }
  static const std::regex ours(R"(layers\.(\d+)\.(.+))"), theirs(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(name, m, to_hf ? ours : theirs)) return "";
  const auto row = [&](const auto& names) {
    return fmt::format(fmt::runtime(to_hf ? "model.layers.{}.{}" : "layers.{}.{}"), m[1].str(), to_hf ? names.second : names.first);
  };
  for (const auto& names : kLatentNames) {
    if (latent && m[2] == (to_hf ? names.first : names.second)) return row(names);
  }
  for (const auto& names : kLayerNames) {
    if (m[2] == (to_hf ? names.first : names.second)) {
      return fmt::format(fmt::runtime(to_hf ? "model.layers.{}.{}" : "layers.{}.{}"), m[1].str(), to_hf ? names.second : names.first);
    }
  }
  return "";
}

// (n_heads * head_dim, dim) viewed per head as `a` x `b` row blocks, swapped to `b` x `a`.
torch::Tensor swap_row_blocks(const torch::Tensor& w, int64_t n_heads, int64_t a, int64_t b) {
  if (w.dim() != 2 || w.size(0) != n_heads * a * b) {
    throw InputError(fmt::format("q/k weight of shape [{}] does not split into {} heads", fmt::join(w.sizes(), ", "), n_heads));
  }
  return w.reshape({n_heads, a, b, w.size(1)}).transpose(1, 2).reshape({w.size(0), w.size(1)}).contiguous();
}

}  // namespace

std::string to_hf_name(const std::string& fqn, bool latent_attention) {
  auto name = translate(fqn, /*to_hf=*/true, latent_attention);
  if (name.empty()) throw InputError(fmt::format("HF export: '{}' is not a decoder parameter name", fqn));
  return name;
}

std::string from_hf_name(const std::string& hf_name, const std::string& source, bool latent_attention) {
  auto name = translate(hf_name, /*to_hf=*/false, latent_attention);
  if (name.empty()) throw InputError(fmt::format("{}: tensor '{}' is not a parameter of the model ctitan builds", source, hf_name));
  return name;
}

namespace {

constexpr std::array<std::pair<const char*, const char*>, 3> kExpertNames{{
    {"w1", "gate_proj"}, {"w3", "up_proj"}, {"w2", "down_proj"}}};

}  // namespace

std::optional<ExpertRow> expert_row_from_hf(const std::string& hf_name) {
  static const std::regex expert(R"(model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(\w+)\.weight)");
  std::smatch m;
  if (!std::regex_match(hf_name, m, expert) || m[2].length() > 9) return std::nullopt;
  for (const auto& [ours, theirs] : kExpertNames) {
    // Ids parsed as integers: a sort of the names would put expert 10 before expert 2.
    if (m[3] == theirs) return ExpertRow{fmt::format("layers.{}.moe.experts.{}", m[1].str(), ours), std::stoll(m[2].str())};
  }
  return std::nullopt;
}

bool is_stacked_experts(const std::string& fqn) {
  static const std::regex stacked(R"(layers\.\d+\.moe\.experts\.w[123])");
  return std::regex_match(fqn, stacked);
}

std::string expert_hf_name(const std::string& fqn, int64_t expert) {
  static const std::regex stacked(R"(layers\.(\d+)\.moe\.experts\.(w[123]))");
  std::smatch m;
  if (!std::regex_match(fqn, m, stacked)) throw InputError(fmt::format("HF export: '{}' is not a stacked experts weight", fqn));
  for (const auto& [ours, theirs] : kExpertNames) {
    if (m[2] == ours) return fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", m[1].str(), expert, theirs);
  }
  throw std::logic_error("expert_hf_name: " + fqn);
}

torch::Tensor permute_rows_to_hf(const torch::Tensor& w, int64_t n_heads) {
  // Per head, row 2i + c (pair i, component c) moves to row c * head_dim/2 + i.
  int64_t half = w.size(0) / n_heads / 2;
  return swap_row_blocks(w, n_heads, half, 2);
}

torch::Tensor permute_rows_from_hf(const torch::Tensor& w, int64_t n_heads) {
  int64_t half = w.size(0) / n_heads / 2;
  return swap_row_blocks(w, n_heads, 2, half);
}

torch::Tensor permute_head_norm_to_hf(const torch::Tensor& w) {
  return permute_rows_to_hf(w.unsqueeze(1), 1).squeeze(1);
}

torch::Tensor permute_head_norm_from_hf(const torch::Tensor& w) {
  return permute_rows_from_hf(w.unsqueeze(1), 1).squeeze(1);
}

namespace {

// The heads whose rows of `fqn` are in RoPE's pair order: wq's, wk's, or the one head a QK-norm
// weight describes; 0 for a tensor RoPE does not read.
int64_t rope_ordered_heads(const std::string& fqn, const models::ModelArgs& args) {
  if (!models::model_spec(args.family).hf.permute_rope_rows) return 0;
  auto has = [&](const char* part) { return fqn.find(part) != std::string::npos; };
  if (has("attention.wq.")) return args.n_heads;
  if (has("attention.wk.")) return args.kv_heads();
  return has("attention.q_norm.") || has("attention.k_norm.") ? 1 : 0;
}

}  // namespace

torch::Tensor to_hf_layout(const std::string& fqn, const torch::Tensor& t, const models::ModelArgs& args) {
  const int64_t heads = rope_ordered_heads(fqn, args);
  if (heads == 0) return t;
  return t.dim() == 1 ? permute_head_norm_to_hf(t) : permute_rows_to_hf(t, heads);
}

torch::Tensor from_hf_layout(const std::string& fqn, const torch::Tensor& t, const models::ModelArgs& args) {
  const int64_t heads = rope_ordered_heads(fqn, args);
  if (heads == 0) return t;
  return t.dim() == 1 ? permute_head_norm_from_hf(t) : permute_rows_from_hf(t, heads);
}

}  // namespace ctitan::checkpoint::hf
