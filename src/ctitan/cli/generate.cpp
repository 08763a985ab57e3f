// `ctitan generate --checkpoint PATH (--prompt TEXT | --prompt-ids 1,2,3) ...`: sample from a
// trained model with a KV cache (models/common/generate.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "ctitan/cli/commands.h"
#include "ctitan/cli/model_source.h"
#include "ctitan/common/error.h"
#include "ctitan/common/threads.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/models/common/generate.h"

namespace ctitan::cli {
namespace {

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    try {
      ids.push_back(std::stoll(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || item.find_first_not_of(" ", used) != std::string::npos) {
      throw InputError(fmt::format("--prompt-ids: '{}' is not an integer (expected e.g. 1,2,3)", item));
    }
  }
  return ids;
}

// A finite number >= 0. CLI11's NonNegativeNumber lets "nan" through and quotes DBL_MAX in full
// when it refuses a value.
CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < 0) {
          return fmt::format("'{}' is not a non-negative number", text);
        }
        return "";
      },
      "NONNEGATIVE");
}

}  // namespace

void add_generate_command(CLI::App& app) {
  struct Args {
    std::string checkpoint, prompt, prompt_ids, config, tokenizer;
    models::SamplingOptions sampling;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  a->sampling.temperature = 1.0;
  auto* cmd = app.add_subcommand("generate", "Sample a continuation from a model (KV-cached decoding)");
  cmd->add_option("--checkpoint", a->checkpoint, "Model: a checkpoint step directory or an HF export")->required();
  auto* prompt = cmd->add_option("--prompt", a->prompt, "Prompt text (needs a tokenizer)");
  auto* prompt_ids = cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt token ids, e.g. 1,2,3");
  prompt->excludes(prompt_ids);
  cmd->add_option("--max-new-tokens", a->sampling.max_new_tokens, "Tokens to generate")->check(non_negative());
  cmd->add_option("--temperature", a->sampling.temperature, "Softmax temperature; 0 = greedy")->check(non_negative());
  cmd->add_option("--top-k", a->sampling.top_k, "Sample among the k most likely tokens; 0 = all")->check(non_negative());
  cmd->add_option("--seed", a->sampling.seed, "Sampling seed");
  cmd->add_option("--config", a->config, "Job config (TOML): model hyperparameters and tokenizer of a step dir")
      ->check(config_file_check());
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer rank file (overrides the checkpoint's)");
  cmd->add_flag("--json", a->json, "Print {\"ids\": [...], \"text\": \"...\"} (the generated part only)");
  cmd->callback([a] {
    if (a->prompt.empty() == a->prompt_ids.empty()) throw InputError("generate: give exactly one of --prompt or --prompt-ids");
    configure_threads();
    auto source = open_model_source(a->checkpoint, a->config);
    std::string tokenizer_path = a->tokenizer.empty() ? source.tokenizer_path : a->tokenizer;
    std::optional<data::Tokenizer> tokenizer;
    if (!tokenizer_path.empty()) tokenizer = data::Tokenizer::load(tokenizer_path);
    if (tokenizer && !source.tokenizer_fingerprint.empty() && tokenizer->fingerprint() != source.tokenizer_fingerprint) {
      throw InputError(fmt::format("generate: {} was trained with another tokenizer (vocabulary fingerprint {}) than "
                                   "{} ({}): its token ids would read as other text",
                                   a->checkpoint, source.tokenizer_fingerprint, tokenizer_path, tokenizer->fingerprint()));
    }
    if (!tokenizer && !a->prompt.empty()) {
      throw InputError(fmt::format("generate: --prompt needs a tokenizer, and {} has none (use --tokenizer or --prompt-ids)",
                                   a->checkpoint));
    }

    std::vector<int64_t> prompt;
    if (!a->prompt.empty()) {
      auto ids = tokenizer->encode(a->prompt, /*bos=*/true, /*eos=*/false);
      prompt.assign(ids.begin(), ids.end());
    } else {
      prompt = parse_ids(a->prompt_ids);
    }
    if (tokenizer) a->sampling.stop_token = tokenizer->eos_id();

    auto model = build_model_from_source(source);
    source.model.clear();  // the model holds its own copy
    // The cache may have at most the machine's physical memory beyond the weights: a cache that
    // could never fit is refused before it is allocated. An upper bound only (other processes,
    // cgroup limits and the forward's activations take their share); unknown memory sets none.
    int64_t held = 0;
    for (const auto& p : model->parameters()) held += p.numel() * int64_t(p.element_size());
    const int64_t physical = metrics::physical_memory_bytes();
    const double cache_memory = physical > 0 ? double(physical) - double(held)
                                             : std::numeric_limits<double>::infinity();
    auto ids = models::generate(*model, prompt, a->sampling, cache_memory);

    std::string text;
    if (tokenizer) {
      // Special and padding ids have no bytes: the text shows only real tokens.
      std::vector<int32_t> decodable;
      for (auto id : ids) {
        if (id < tokenizer->vocab_size() && !tokenizer->is_special(id)) decodable.push_back(int32_t(id));
      }
      text = tokenizer->decode(decodable);
    }
    if (a->json) {
      nlohmann::json out = {{"ids", ids}, {"text", text}};
      // A sampled sequence may end inside a UTF-8 character: replace rather than throw.
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else if (tokenizer) {
      std::cout << a->prompt << text << "\n";
    } else {
      std::cout << fmt::format("{}", fmt::join(ids, " ")) << "\n";
    }
  });
}

}  // namespace ctitan::cli
