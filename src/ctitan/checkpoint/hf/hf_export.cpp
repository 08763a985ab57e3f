#include "ctitan/checkpoint/hf/hf_export.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "ctitan/checkpoint/hf/hf_config.h"
#include "ctitan/checkpoint/hf/hf_import.h"
#include "ctitan/checkpoint/hf/hf_names.h"
#include "ctitan/checkpoint/hf/safetensors.h"
#include "ctitan/checkpoint/metadata.h"
#include "ctitan/common/error.h"
#include "ctitan/common/json_file.h"
#include "ctitan/common/progress_bar.h"
#include "ctitan/data/hf_tokenizer_json.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/models/common/parameter_shapes.h"
#include "ctitan/models/model_spec.h"

namespace ctitan::checkpoint::hf {
namespace {

namespace fs = std::filesystem;
using models::ModelArgs;

// The model's tensors under HF names, in HF order (embeddings, layer 0..n-1, norm, head) so
// that shards cut the model at layer boundaries where they can.
std::vector<std::pair<std::string, torch::Tensor>> hf_tensors(const StateDict& model, const ModelArgs& args,
                                                              torch::ScalarType dtype) {
  std::vector<std::string> order{"tok_embeddings.weight"};
  for (int64_t i = 0; i < args.n_layers; ++i) {
    for (const char* suffix : {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                               "attention.wo.weight", "attention.q_norm.weight", "attention.k_norm.weight",
                               "feed_forward.w1.weight", "feed_forward.w3.weight", "feed_forward.w2.weight",
                               "moe.router.gate.weight", "moe.experts.w1", "moe.experts.w3", "moe.experts.w2",
                               "moe.shared_experts.w1.weight", "moe.shared_experts.w3.weight",
                               "moe.shared_experts.w2.weight", "attention_norm.weight", "ffn_norm.weight",
                               "attention.wq_a.weight", "attention.wq_b.weight", "attention.wkv_a.weight",
                               "attention.kv_norm.weight", "attention.wkv_b.weight", "moe.expert_bias"}) {
      auto fqn = fmt::format("layers.{}.{}", i, suffix);
      // Only what the family and the layer have; the bias only where HF's model has one.
      if (fqn.ends_with("moe.expert_bias") && !models::model_spec(args.family).hf.expert_bias) continue;
      if (model.count(fqn)) order.push_back(fqn);
    }
  }
  order.push_back("norm.weight");
  if (!args.tie_word_embeddings) order.push_back("output.weight");

  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& fqn : order) {
    // Permute in the source dtype, then cast: a pure reordering, so exact either way.
    auto t = to_hf_layout(fqn, model.at(fqn).detach().to(torch::kCPU), args);
    if (is_stacked_experts(fqn)) {
      for (int64_t e = 0; e < t.size(0); ++e) out.emplace_back(expert_hf_name(fqn, e), t[e].to(dtype).contiguous());
    } else {
      // The bias stays fp32 (HF's e_score_correction_bias is kept in fp32 whatever the dtype).
      const auto type = fqn.ends_with("moe.expert_bias") ? torch::kFloat : dtype;
      out.emplace_back(to_hf_name(fqn, args.latent_attention()), t.to(type).contiguous());
    }
  }
  return out;
}

// HF's Qwen3-MoE routes without a selection bias: a trained bias is dropped, and the export
// routes some tokens to other experts than ctitan did. Said, not refused: torchtitan drops it too.
void warn_if_bias_dropped(const StateDict& model, const ModelArgs& args) {
  if (models::model_spec(args.family).hf.expert_bias) return;
  double largest = 0;
  for (const auto& [fqn, shape] : models::buffer_shapes(args)) largest = std::max(largest, model.at(fqn).abs().max().item<double>());
  if (largest > 0) {
    spdlog::warn("HF export: the experts' selection bias (|bias| up to {:.3g}) has no place in {}'s config and is "
                 "dropped; the export's router chooses by the scores alone", largest, models::model_spec(args.family).hf.architecture);
  }
}

}  // namespace

int export_hf(const StateDict& model, const ModelArgs& args, const HfExportOptions& options, const fs::path& out_dir) {
  check_model_state(model, args, "HF export");
  warn_if_bias_dropped(model, args);
  check_output_dir(out_dir, options.overwrite, "HF export: output");
  if (options.max_shard_bytes <= 0) throw InputError("HF export: max shard size must be positive");

  std::optional<SpecialTokens> specials;
  std::optional<data::Tokenizer> tokenizer;
  if (!options.tokenizer_path.empty()) {
    tokenizer = data::Tokenizer::load(options.tokenizer_path);
    if (tokenizer->vocab_size() > args.vocab_size) {
      throw InputError(fmt::format("HF export: tokenizer {} has {} tokens, more than the model's vocab_size {}",
                                   options.tokenizer_path, tokenizer->vocab_size(), args.vocab_size));
    }
    specials = SpecialTokens{tokenizer->bos_id(), tokenizer->eos_id()};
  }

  // Greedy packing in model order: a new shard starts when the next tensor would overflow.
  std::vector<NamedTensors> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (auto& [name, t] : hf_tensors(model, args, options.dtype)) {
    int64_t bytes = tensor_bytes(t);
    if (shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace(name, t);
    shard_bytes += bytes;
    total_bytes += bytes;
  }

  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  int n = static_cast<int>(shards.size());
  write_directory_whole(out_dir, [&](const fs::path& staging) {
    if (n == 1) {
      save_safetensors(staging / "model.safetensors", shards[0], metadata);
    } else {
      nlohmann::json weight_map = nlohmann::json::object();
      ProgressBar progress("safetensors files written", n);
      for (int i = 0; i < n; ++i) {
        auto file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
        save_safetensors(staging / file, shards[size_t(i)], metadata);
        for (const auto& [name, _] : shards[size_t(i)]) weight_map[name] = file;
        progress.add();
      }
      write_json_file(staging / "model.safetensors.index.json",
                      {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}});
    }
    write_json_file(staging / "config.json", hf_config_json(args, options.dtype, specials));
    if (tokenizer) {
      // tokenizer.json is what `transformers` loads; tokenizer.model (the tiktoken file Meta ships)
      // too when the tokenizer fits that format.
      data::write_hf_tokenizer_files(*tokenizer, staging);
      if (tokenizer->fits_tiktoken_format()) tokenizer->save((staging / "tokenizer.model").string());
    }
  });
  return n;
}

void check_output_dir(const fs::path& out_dir, bool overwrite, const std::string& what) {
  std::error_code ec;
  auto status = fs::status(out_dir, ec);  // through a symlink: what matters is what it names
  if (status.type() == fs::file_type::not_found) return;
  if (ec) throw InputError(fmt::format("{} {}: cannot check it: {}", what, out_dir.string(), ec.message()));
  if (!fs::is_directory(status)) {
    throw InputError(fmt::format("{} {} already exists and is not a directory", what, out_dir.string()));
  }
  bool empty = fs::is_empty(out_dir, ec);
  if (ec) throw InputError(fmt::format("{} {}: cannot list it: {}", what, out_dir.string(), ec.message()));
  if (empty || overwrite) return;
  // Issue #17: an import over a training run's step-15 silently replaced its optimizer state.
  std::string kind = fs::exists(out_dir / kMetadataFile, ec) ? " (a checkpoint step directory)"
                     : is_hf_dir(out_dir)                     ? " (an HF export)"
                                                              : "";
  throw InputError(fmt::format("{} {} already exists and is not empty{}; pass --overwrite to replace it", what,
                               out_dir.string(), kind));
}

void write_directory_whole(const fs::path& out_dir, const std::function<void(const fs::path&)>& write) {
  // "out/", "./out" and "out" name one directory; so does "." its parent's entry.
  fs::path target = fs::absolute(out_dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  // A unique sibling (same file system, so the renames below are atomic): two commands writing
  // the same output never share it, and nothing of the user's is ever reused or deleted as one.
  std::string temp_name = target.string() + ".partial-XXXXXX";
  if (::mkdtemp(temp_name.data()) == nullptr) {
    throw IoError(fmt::format("cannot create a directory beside {}: {}", target.string(), std::strerror(errno)));
  }
  const fs::path temp = temp_name, staging = temp / "new" / target.filename(), replaced = temp / "old";
  try {
    fs::create_directories(staging);
    write(staging);
    // rename(2) replaces only an empty directory: move the old one aside first.
    if (fs::exists(fs::symlink_status(target))) fs::rename(target, replaced);
    fs::rename(staging, target);
  } catch (...) {
    std::error_code ec;
    if (fs::exists(replaced, ec)) {
      // The old directory was moved aside but the new one did not take its place: put it back,
      // and never delete it with the temporary.
      if (!fs::exists(fs::symlink_status(target, ec))) fs::rename(replaced, target, ec);
      if (!ec) fs::remove_all(temp, ec);
    } else {
      fs::remove_all(temp, ec);
    }
    throw;
  }
  std::error_code ec;
  fs::remove_all(temp, ec);
  if (ec) spdlog::warn("{} is written, but the replaced directory is left in {}: {}", target.string(), temp.string(),
                       ec.message());
}

}  // namespace ctitan::checkpoint::hf
