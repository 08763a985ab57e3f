#pragma once
// Writes a model as a Hugging Face directory of its family (LlamaForCausalLM, Qwen3ForCausalLM): config.json, model.safetensors
// (or numbered shards plus model.safetensors.index.json), and tokenizer.model when known.
// See docs/HF_EXPORT.md for the format and the name mapping.
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <string>

#include "ctitan/common/state_dict.h"
#include "ctitan/models/common/model_args.h"

namespace ctitan::checkpoint::hf {

struct HfExportOptions {
  torch::ScalarType dtype = torch::kFloat;     // dtype of the written tensors
  int64_t max_shard_bytes = 5'000'000'000;     // a shard holds at most this (one bigger tensor gets its own)
  std::string tokenizer_path;                  // rank file or tokenizer.json, written as both; "" = none
  bool overwrite = false;                      // replace a non-empty out_dir (once the new one is whole)
};

// `model`: full tensors by torchtitan FQN, exactly the parameters of `args` (checked). The
// directory appears whole or not at all (written beside it, then renamed); `out_dir` must not
// exist or be empty, unless options.overwrite. Returns the number of safetensors files written.
int export_hf(const StateDict& model, const models::ModelArgs& args, const HfExportOptions& options,
              const std::filesystem::path& out_dir);

// The rule for every directory ctitan writes on request (`checkpoint export|import --output`):
// `out_dir` may be absent or an empty directory; a non-empty one (a training checkpoint's step
// directory, say) only with `overwrite`; anything that is not a directory never. Otherwise an
// InputError "`what` <out_dir> ...": `what` names the command and flag.
void check_output_dir(const std::filesystem::path& out_dir, bool overwrite, const std::string& what);

// Makes a directory at `out_dir` by calling `write(staging)`, where `staging` is a fresh empty
// directory of the same name inside a temporary sibling `<out_dir>.partial-XXXXXX`. Once `write`
// returns, staging takes out_dir's place (an existing out_dir, allowed by check_output_dir, is
// removed only then). If `write` throws, the temporary is removed and out_dir is untouched.
void write_directory_whole(const std::filesystem::path& out_dir,
                           const std::function<void(const std::filesystem::path&)>& write);

}  // namespace ctitan::checkpoint::hf
