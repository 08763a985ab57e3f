#include "ctitan/checkpoint/hf/hf_import.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ctitan/checkpoint/hf/hf_config.h"
#include "ctitan/checkpoint/hf/hf_names.h"
#include "ctitan/checkpoint/hf/safetensors.h"
#include "ctitan/common/error.h"
#include "ctitan/common/progress_bar.h"
#include "ctitan/models/common/parameter_shapes.h"

namespace ctitan::checkpoint::hf {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
}

// The safetensors files of the export: the index's shards, or the single model.safetensors.
std::vector<fs::path> weight_files(const fs::path& dir) {
  auto index_path = dir / "model.safetensors.index.json";
  if (!fs::exists(index_path)) {
    if (!fs::exists(dir / "model.safetensors")) {
      throw InputError(fmt::format("HF import {}: neither model.safetensors nor model.safetensors.index.json", dir.string()));
    }
    return {dir / "model.safetensors"};
  }
  auto index = read_json(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw InputError(fmt::format("{}: missing key 'weight_map'", index_path.string()));
  }
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw InputError(fmt::format("{}: weight_map['{}'] is not a file name", index_path.string(), name));
    files.insert(file.get<std::string>());
  }
  std::vector<fs::path> paths;
  for (const auto& f : files) {
    if (!fs::exists(dir / f)) {
      throw InputError(fmt::format("{}: names shard {}, which does not exist", index_path.string(), f));
    }
    paths.push_back(dir / f);
  }
  return paths;
}

}  // namespace

bool is_hf_dir(const fs::path& dir) {
  return fs::exists(dir / "config.json") &&
         (fs::exists(dir / "model.safetensors") || fs::exists(dir / "model.safetensors.index.json"));
}

HfModel import_hf(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw InputError(fmt::format("HF import: {} is not a directory", dir.string()));
  auto config_path = dir / "config.json";
  HfModel result;
  auto config = read_json(config_path);
  result.args = model_args_from_hf_config(config, config_path.string());
  if (config.contains("torch_dtype") && config["torch_dtype"].is_string()) {
    result.dtype = float_dtype_from_name(config["torch_dtype"].get<std::string>(), config_path.string() + " torch_dtype");
  }

  const auto files = weight_files(dir);
  ProgressBar progress("safetensors files read", int64_t(files.size()));
  // Routed experts, stored one per tensor: stacked by integer id once every file is read.
  std::map<std::string, std::map<int64_t, torch::Tensor>> expert_rows;
  for (const auto& file : files) {
    progress.add();
    for (auto& [hf_name, t] : load_safetensors(file).tensors) {
      // Older HF checkpoints store the rotary table as a buffer; it is recomputed, not loaded.
      if (hf_name.find("rotary_emb.inv_freq") != std::string::npos) continue;
      // Weights are floating point; an integer or boolean tensor would be cast on load and
      // computed with as if it were one.
      if (!c10::isFloatingType(t.scalar_type())) {
        throw InputError(fmt::format("{}: tensor '{}' is {}, not a floating-point weight", file.string(), hf_name,
                                     c10::toString(t.scalar_type())));
      }
      if (auto row = expert_row_from_hf(hf_name)) {
        if (!expert_rows[row->fqn].emplace(row->expert, t).second) {
          throw InputError(fmt::format("{}: tensor '{}' appears in more than one shard", file.string(), hf_name));
        }
        continue;
      }
      if (!result.model.emplace(from_hf_name(hf_name, file.string(), result.args.latent_attention()), t).second) {
        throw InputError(fmt::format("{}: tensor '{}' appears in more than one shard", file.string(), hf_name));
      }
    }
  }
  for (auto& [fqn, rows] : expert_rows) {
    std::vector<torch::Tensor> stacked;
    for (int64_t e = 0; e < int64_t(rows.size()); ++e) {
      auto it = rows.find(e);
      if (it == rows.end()) {
        throw InputError(fmt::format("HF import {}: missing tensor '{}'", dir.string(), expert_hf_name(fqn, e)));
      }
      stacked.push_back(it->second);
    }
    try {
      result.model[fqn] = torch::stack(stacked);  // (E, out, in)
    } catch (const c10::Error&) {
      throw InputError(fmt::format("HF import {}: the experts of '{}' differ in shape", dir.string(), fqn));
    }
  }
  // HF's Qwen3-MoE has no selection bias (DeepSeek-V3's is read above): balancing starts from
  // zero, as a new model's does.
  for (const auto& [fqn, shape] : models::buffer_shapes(result.args)) {
    if (!result.model.count(fqn)) result.model[fqn] = torch::zeros(shape);
  }
  // A config that ties the head to the embeddings ships no lm_head.weight.
  if (!result.model.count("output.weight") && config.contains("tie_word_embeddings") &&
      config["tie_word_embeddings"].is_boolean() && config["tie_word_embeddings"].get<bool>() &&
      result.model.count("tok_embeddings.weight")) {
    result.model["output.weight"] = result.model["tok_embeddings.weight"].clone();
  }
  check_model_state(result.model, result.args, fmt::format("HF import {}", dir.string()));
  // Shapes are checked, so every q/k splits into its heads.
  for (auto& [fqn, t] : result.model) t = from_hf_layout(fqn, t, result.args);
  // ctitan's own exports carry both files, which encode alike; Hub models often only tokenizer.json.
  if (fs::exists(dir / "tokenizer.model")) {
    result.tokenizer_path = dir / "tokenizer.model";
  } else if (fs::exists(dir / "tokenizer.json")) {
    result.tokenizer_path = dir / "tokenizer.json";
  }
  return result;
}

}  // namespace ctitan::checkpoint::hf
