// `ctitan tokenizer train|encode|decode`
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "ctitan/cli/commands.h"
#include "ctitan/common/output_target.h"
#include "ctitan/data/bpe_trainer.h"
#include "ctitan/data/documents.h"
#include "ctitan/data/hf_tokenizer_json.h"
#include "ctitan/data/tokenizer.h"

namespace ctitan::cli {

void add_tokenizer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "Train, convert or use a byte-level BPE tokenizer (tiktoken rank file or tokenizer.json)");
  cmd->require_subcommand(1);

  struct TrainArgs {
    std::vector<std::string> inputs;
    int64_t vocab_size = 2048;
    std::string output;
    std::string format = "auto";
    std::string text_column = "text";
    bool overwrite = false;
  };
  auto train_args = std::make_shared<TrainArgs>();
  auto* train = cmd->add_subcommand("train", "Learn BPE merges from text files or directories");
  train->add_option("--input", train_args->inputs, "Text/JSONL/Parquet files, directories or globs")->required();
  train->add_option("--vocab-size", train_args->vocab_size, "Vocabulary size, counting BOS and EOS");
  train->add_option("--output", train_args->output, "Output rank file")->required();
  train->add_option("--format", train_args->format, "auto | text | jsonl | parquet");
  train->add_option("--text-column", train_args->text_column, "JSONL field or Parquet column holding the text")
      ->capture_default_str();
  train->add_flag("--overwrite", train_args->overwrite, "Replace an existing --output");
  train->callback([train_args] {
    auto start = std::chrono::steady_clock::now();
    std::vector<data::DatasetFile> files;
    for (const auto& input : train_args->inputs) {
      auto listed = data::list_dataset_files(input, train_args->format, "--input");
      files.insert(files.end(), listed.begin(), listed.end());
    }
    std::vector<std::filesystem::path> inputs;
    for (const auto& file : files) inputs.emplace_back(file.path);
    check_output_file("tokenizer train: --output", train_args->output, train_args->overwrite, inputs);
    std::vector<std::string> texts;
    for (const auto& file : files) {
      auto docs = data::read_documents(file, {train_args->text_column});
      texts.insert(texts.end(), std::make_move_iterator(docs.begin()), std::make_move_iterator(docs.end()));
    }
    auto tokenizer = data::train_bpe(texts, {train_args->vocab_size, /*show_progress=*/true});
    auto parent = std::filesystem::path(train_args->output).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    tokenizer.save(train_args->output);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("tokenizer: {} documents, vocab {} ({} base + BOS/EOS), written to {} in {:.1f}s", texts.size(),
                 tokenizer.vocab_size(), tokenizer.n_base(), train_args->output, seconds);
  });

  auto tok_path = std::make_shared<std::string>();
  auto text = std::make_shared<std::string>();
  auto* encode = cmd->add_subcommand("encode", "Print the token ids of --text (or stdin)");
  encode->add_option("--tokenizer", *tok_path, "Rank file, tokenizer.json, or a directory with either")->required();
  encode->add_option("--text", *text, "Text to encode");
  encode->callback([tok_path, text] {
    auto tokenizer = data::Tokenizer::load(*tok_path);
    std::string input = *text;
    if (input.empty()) {
      std::stringstream in;
      in << std::cin.rdbuf();
      input = in.str();
    }
    auto ids = tokenizer.encode(input, /*bos=*/false, /*eos=*/false);
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
  });

  auto ids = std::make_shared<std::vector<int32_t>>();
  auto* decode = cmd->add_subcommand("decode", "Print the text of token ids");
  decode->add_option("--tokenizer", *tok_path, "Rank file, tokenizer.json, or a directory with either")->required();
  decode->add_option("ids", *ids, "Token ids")->required();
  decode->callback([tok_path, ids] { std::cout << data::Tokenizer::load(*tok_path).decode(*ids) << "\n"; });

  struct ConvertArgs {
    std::string tokenizer, output_dir;
    bool overwrite = false;
  };
  auto convert_args = std::make_shared<ConvertArgs>();
  auto* convert = cmd->add_subcommand(
      "convert", "Write a tokenizer as Hugging Face files (tokenizer.json, tokenizer_config.json, "
                 "generation_config.json) plus tokenizer.model when it fits the tiktoken format");
  convert->add_option("--tokenizer", convert_args->tokenizer, "Rank file, tokenizer.json, or a directory with either")
      ->required();
  convert->add_option("--output-dir", convert_args->output_dir, "Directory to write (created if missing)")->required();
  convert->add_flag("--overwrite", convert_args->overwrite, "Replace tokenizer files already in --output-dir");
  convert->callback([convert_args] {
    auto tokenizer = data::Tokenizer::load(convert_args->tokenizer);
    const std::filesystem::path dir = convert_args->output_dir;
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "tokenizer.model"}) {
      check_output_file("tokenizer convert: --output-dir", dir / name, convert_args->overwrite,
                        {data::tokenizer_file(convert_args->tokenizer)});
    }
    std::filesystem::create_directories(convert_args->output_dir);
    data::write_hf_tokenizer_files(tokenizer, convert_args->output_dir);
    bool tiktoken = tokenizer.fits_tiktoken_format();
    if (tiktoken) tokenizer.save((std::filesystem::path(convert_args->output_dir) / "tokenizer.model").string());
    spdlog::info("tokenizer: vocab {} (BOS {}, EOS {}) written to {} as tokenizer.json{}", tokenizer.vocab_size(),
                 tokenizer.bos_id(), tokenizer.eos_id(), convert_args->output_dir, tiktoken ? " and tokenizer.model" : "");
  });
}

}  // namespace ctitan::cli
