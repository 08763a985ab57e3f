// `ctitan data prepare`: tokenize a text/JSONL dataset (plain, .gz or .zst) once into a token file.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <thread>

#include "ctitan/cli/commands.h"
#include "ctitan/common/output_target.h"
#include "ctitan/common/error.h"
#include "ctitan/common/progress_bar.h"
#include "ctitan/data/documents.h"
#include "ctitan/data/parallel_tokenize.h"
#include "ctitan/data/token_file.h"
#include "ctitan/data/tokenizer.h"

namespace ctitan::cli {

void add_data_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "Dataset tools");
  cmd->require_subcommand(1);
  struct Args {
    std::string input, tokenizer, output, format = "auto", text_column = "text";
    bool overwrite = false;
    int workers = int(std::max(1u, std::thread::hardware_concurrency()));
  };
  auto args = std::make_shared<Args>();
  auto* prepare = cmd->add_subcommand("prepare", "Tokenize text, JSONL (plain, .gz, .zst) or Parquet into a .bin token file");
  prepare->add_option("--input", args->input, "Text/JSONL/Parquet file, directory or glob")->required();
  prepare->add_option("--tokenizer", args->tokenizer, "tiktoken rank file, tokenizer.json, or a directory with either")
      ->required();
  prepare->add_option("--output", args->output, "Output .bin file")->required();
  prepare->add_option("--format", args->format, "auto | text | jsonl | parquet");
  prepare->add_option("--text-column", args->text_column, "JSONL field or Parquet column holding the text")
      ->capture_default_str();
  prepare->add_flag("--overwrite", args->overwrite, "Replace an existing --output");
  prepare->add_option("--workers", args->workers, "Tokenizer threads (default: one per CPU); 1 = no extra threads")
      ->capture_default_str();
  prepare->callback([args] {
    // More threads than any machine has cores only cost memory; thousands fail to start.
    constexpr int kMaxWorkers = 1024;
    if (args->workers < 1 || args->workers > kMaxWorkers) {
      throw InputError(fmt::format("data prepare: --workers must be from 1 to {} (got {})", kMaxWorkers, args->workers));
    }
    const auto tokenizer = data::Tokenizer::load(args->tokenizer);
    auto files = data::list_dataset_files(args->input, args->format, "--input");
    if (files.front().format->tokens) {
      throw InputError("data prepare: --input '" + args->input + "' is already a token file; train on it directly");
    }
    std::vector<std::filesystem::path> inputs = {data::tokenizer_file(args->tokenizer)};
    for (const auto& file : files) inputs.emplace_back(file.path);
    check_output_file("data prepare: --output", args->output, args->overwrite, inputs);
    data::TokenFileWriter writer(args->output, uint32_t(tokenizer.vocab_size()));
    ProgressBar progress("tokens", 0);
    auto counts = data::tokenize_in_order(
        files, data::DocumentOptions{args->text_column}, tokenizer, args->workers, [&](const std::vector<int32_t>& ids) { writer.append(ids); },
        [&](const data::TokenizeCounts& so_far) { progress.update(so_far.tokens); });
    progress.finish();
    writer.finish();
    spdlog::info("wrote {} tokens from {} documents to {} ({} workers)", counts.tokens, counts.documents,
                 args->output, args->workers);
  });
}

}  // namespace ctitan::cli
