// `ctitan data prepare`: tokenize a text/JSONL dataset once into a token file.
#include <spdlog/spdlog.h>

#include "ctitan/cli/commands.h"
#include "ctitan/common/progress_bar.h"
#include "ctitan/data/token_file.h"
#include "ctitan/data/token_stream.h"
#include "ctitan/data/tokenizer.h"

namespace ctitan::cli {

void add_data_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "Dataset tools");
  cmd->require_subcommand(1);
  struct Args {
    std::string input, tokenizer, output, format = "auto";
  };
  auto args = std::make_shared<Args>();
  auto* prepare = cmd->add_subcommand("prepare", "Tokenize text or JSONL into a .bin token file");
  prepare->add_option("--input", args->input, "Text/JSONL file or directory")->required();
  prepare->add_option("--tokenizer", args->tokenizer, "Rank file")->required();
  prepare->add_option("--output", args->output, "Output .bin file")->required();
  prepare->add_option("--format", args->format, "auto | text | jsonl");
  prepare->callback([args] {
    auto tokenizer = std::make_shared<const data::Tokenizer>(data::Tokenizer::load(args->tokenizer));
    auto stream = data::open_token_stream(args->input, args->format, tokenizer, "--input");
    data::TokenFileWriter writer(args->output, uint32_t(tokenizer->vocab_size()));
    ProgressBar progress("tokens", 0);
    while (auto chunk = stream->next()) {
      writer.append(*chunk);
      progress.update(writer.tokens_written());
    }
    progress.finish();
    writer.finish();
    spdlog::info("wrote {} tokens from {} documents to {}", writer.tokens_written(), stream->position(),
                 args->output);
  });
}

}  // namespace ctitan::cli
