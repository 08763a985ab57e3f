// `ctitan checkpoint export|import`: Hugging Face safetensors in and out. `checkpoint inspect`
// lives with the checkpointer; both register under the same `checkpoint` group.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <regex>

#include "ctitan/checkpoint/metadata.h"
#include "ctitan/checkpoint/model_io.h"
#include "ctitan/checkpoint/retention.h"
#include "ctitan/checkpoint/hf/hf_config.h"
#include "ctitan/checkpoint/hf/hf_export.h"
#include "ctitan/checkpoint/hf/hf_import.h"
#include "ctitan/cli/commands.h"
#include "ctitan/common/output_target.h"
#include "ctitan/cli/model_source.h"
#include "ctitan/common/error.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/models/common/parameter_shapes.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/train/model_builder.h"

namespace ctitan::cli {
namespace {

// --overwrite replaces --output once the new one is whole: were it the --input (or a directory
// holding it), the replacement would delete what it was made from.
void refuse_output_that_is_the_input(const std::string& command, const std::string& input, const std::string& output) {
  for (auto dir = std::filesystem::absolute(input); !dir.empty(); dir = dir.parent_path()) {
    if (same_file(dir, output)) {
      throw InputError(fmt::format("{}: --output {} is, or holds, the --input {}", command, output, input));
    }
    if (dir == dir.parent_path()) break;
  }
}

// "123", "500MB", "5GB" (decimal, as HF spells max_shard_size) or "64KiB", "2GiB" -> bytes.
int64_t parse_size(const std::string& text) {
  static const std::regex re(R"(\s*(\d+)\s*([KMG]i?B)?\s*)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, re)) {
    throw InputError(fmt::format("--max-shard-size '{}' is not a size like 5GB, 500MB or 1048576", text));
  }
  int64_t value = 0;
  try {
    value = std::stoll(m[1].str());
  } catch (const std::out_of_range&) {
    throw InputError(fmt::format("--max-shard-size '{}' is too large", text));
  }
  std::string unit = m[2].str();
  for (auto& c : unit) c = char(std::toupper(c));
  int64_t scale = 1;
  if (!unit.empty()) {
    int64_t base = unit.size() == 3 ? 1024 : 1000;  // KiB vs KB
    int power = unit[0] == 'K' ? 1 : unit[0] == 'M' ? 2 : 3;
    for (int i = 0; i < power; ++i) scale *= base;
  }
  return value * scale;
}

CLI::App& checkpoint_group(CLI::App& app) {
  // Whichever registration runs first creates the group; the other one finds it.
  for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == "checkpoint") return *sub;
  }
  auto* group = app.add_subcommand("checkpoint", "Inspect, export and import checkpoints");
  group->require_subcommand(1);
  return *group;
}

// A job config whose [model] section rebuilds exactly `hf`'s parameter shapes, so that a
// training run resuming from the seed checkpoint builds the same model.
config::JobConfig job_config_for(const checkpoint::hf::HfModel& hf, const std::string& config_path,
                                 const std::string& source) {
  auto job = config::load_job_config(config_path, {});
  const auto& family = models::model_spec(hf.args.family).name;
  if (job.model.name != family) {
    if (!config_path.empty()) {
      throw InputError(fmt::format("checkpoint import: {} is a {} model, but {} has model.name '{}'", source, family,
                                   config_path, job.model.name));
    }
    // No --config: the family's first flavor gives the features config.json leaves implicit.
    job.model.name = family;
    job.model.flavor = models::model_spec(family).flavors.front().first;
  }
  job.model.dim = hf.args.dim;
  job.model.n_layers = hf.args.n_layers;
  job.model.n_heads = hf.args.n_heads;
  job.model.n_kv_heads = hf.args.kv_heads();
  job.model.vocab_size = hf.args.vocab_size;
  job.model.rope_theta = hf.args.rope_theta;
  job.model.norm_eps = hf.args.norm_eps;
  job.model.head_dim = hf.args.explicit_head_dim;
  job.model.hidden_dim = hf.args.ffn_hidden_dim();
  if (!hf.tokenizer_path.empty()) job.model.tokenizer_path = hf.tokenizer_path.string();
  auto rebuilt = train::model_args_from_config(job, nullptr);
  // What the overrides cannot set (QK-norm, a tied head) comes from the flavor.
  if (models::parameter_shapes(rebuilt) != models::parameter_shapes(hf.args)) {
    throw InputError(fmt::format("checkpoint import: model.flavor '{}' of {} builds other parameters than {} "
                                 "(QK-norm {} vs {}, tied embeddings {} vs {}); pass --config with an untied flavor",
                                 job.model.flavor, family, source, rebuilt.qk_norm, hf.args.qk_norm,
                                 rebuilt.tie_word_embeddings, hf.args.tie_word_embeddings));
  }
  return job;
}

}  // namespace

void add_checkpoint_export_commands(CLI::App& app) {
  auto& group = checkpoint_group(app);

  struct ExportArgs {
    std::string input, output, format = "safetensors", dtype = "float32", max_shard_size = "5GB";
    std::string config, tokenizer;
    bool best = false, overwrite = false;
  };
  auto ea = std::make_shared<ExportArgs>();
  auto* exp = group.add_subcommand("export", "Write a model as a Hugging Face directory (LlamaForCausalLM, Qwen3ForCausalLM)");
  exp->add_option("--input", ea->input, "Model: a checkpoint step directory or an HF export (with --best: a checkpoint folder)")->required();
  exp->add_flag("--best", ea->best, "--input is a checkpoint folder: export its best step (checkpoint.keep_best's best.json)");
  exp->add_option("--output", ea->output, "New directory to write (or an empty one)")->required();
  exp->add_flag("--overwrite", ea->overwrite, "Replace a non-empty --output directory, once the new one is written");
  exp->add_option("--format", ea->format, "Output format (only safetensors)");
  exp->add_option("--dtype", ea->dtype, "float32 | bfloat16 | float16");
  exp->add_option("--max-shard-size", ea->max_shard_size, "Largest safetensors file, e.g. 5GB, 500MB, 1048576");
  exp->add_option("--config", ea->config, "Job config (TOML): model hyperparameters and tokenizer of a step dir")
      ->check(config_file_check());
  exp->add_option("--tokenizer", ea->tokenizer, "Tokenizer to copy as tokenizer.model (overrides the source's)");
  exp->callback([ea] {
    if (ea->format != "safetensors") throw InputError(fmt::format("--format '{}' is unknown (only safetensors)", ea->format));
    checkpoint::hf::HfExportOptions options;
    options.dtype = checkpoint::hf::float_dtype_from_name(ea->dtype, "--dtype");
    options.max_shard_bytes = parse_size(ea->max_shard_size);
    options.overwrite = ea->overwrite;
    // Before the model is read: refusing takes no time.
    checkpoint::hf::check_output_dir(ea->output, ea->overwrite, "checkpoint export: --output");
    refuse_output_that_is_the_input("checkpoint export", ea->input, ea->output);
    if (ea->best) {
      auto best = checkpoint::read_best(ea->input);
      if (best.step < 0) {
        throw InputError(fmt::format("checkpoint export --best: {} has no {} (train with checkpoint.keep_best = true)",
                                     ea->input, checkpoint::kBestFile));
      }
      ea->input = (std::filesystem::path(ea->input) / checkpoint::step_dir_name(best.step)).string();
      spdlog::info("best checkpoint: {} (validation loss {:.4f})", ea->input, best.validation_loss);
    }
    auto source = open_model_source(ea->input, ea->config);
    options.tokenizer_path = ea->tokenizer.empty() ? source.tokenizer_path : ea->tokenizer;
    int files = checkpoint::hf::export_hf(source.model, source.args, options, ea->output);
    spdlog::info("exported {} parameters to {} ({} safetensors file{}, {})", source.model.size(), ea->output, files,
                 files == 1 ? "" : "s", ea->dtype);
  });

  struct ImportArgs {
    std::string input, output, config;
    bool overwrite = false;
  };
  auto ia = std::make_shared<ImportArgs>();
  auto* imp = group.add_subcommand("import", "Read a Hugging Face Llama 3 or Qwen3 directory into a seed checkpoint");
  imp->add_option("--input", ia->input, "HF directory (config.json + model.safetensors[.index.json])")->required();
  imp->add_option("--output", ia->output, "Step directory to write (new, or an empty directory)")->required();
  imp->add_flag("--overwrite", ia->overwrite, "Replace a non-empty --output (e.g. a training step directory), once the new one is written");
  imp->add_option("--config", ia->config, "Job config (TOML) the seed checkpoint is for; [model] shape is set from the import")
      ->check(config_file_check());
  imp->callback([ia] {
    // Issue #17: `--output .../step-15` of a training run replaced its full checkpoint (optimizer,
    // dataloader, RNG) by a model-only one. Checked before the import reads anything.
    checkpoint::hf::check_output_dir(ia->output, ia->overwrite, "checkpoint import: --output");
    refuse_output_that_is_the_input("checkpoint import", ia->input, ia->output);
    auto hf = checkpoint::hf::import_hf(ia->input);
    auto job = job_config_for(hf, ia->config, ia->input);
    // Training keeps fp32 master weights whatever the export's dtype.
    for (auto& [_, t] : hf.model) t = t.to(torch::kFloat);
    // Staged beside --output under the same name (the step number is read from it); an existing
    // directory is replaced only once the new one is complete.
    checkpoint::hf::write_directory_whole(ia->output, [&](const std::filesystem::path& staging) {
      checkpoint::save_model_only_checkpoint(staging, hf.model, job);
    });
    spdlog::info("imported {} parameters from {} into {}", hf.model.size(), ia->input, ia->output);
  });
}

}  // namespace ctitan::cli
