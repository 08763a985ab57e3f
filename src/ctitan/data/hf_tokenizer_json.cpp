#include "ctitan/data/hf_tokenizer_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <tuple>
#include <unordered_map>

#include "ctitan/common/error.h"
#include "ctitan/common/input_file.h"
#include "ctitan/common/json_file.h"
#include "ctitan/common/message_text.h"
#include "ctitan/common/path_text.h"
#include "ctitan/data/byte_level.h"

namespace ctitan::data {
namespace fs = std::filesystem;
using nlohmann::json;
namespace {

// What Hugging Face's ByteLevel pre-tokenizer splits with when `use_regex` is set (GPT-2's).
const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// `what` may quote the file's keys and tokens: one_line keeps the message on one line.
[[noreturn]] void fail_tokenizer_json(const fs::path& file, const std::string& what) {
  throw InputError(fmt::format("tokenizer error: {}: {}", file.string(), one_line(what)));
}

json read_json(const fs::path& file) {
  if (auto why = unreadable_input_reason(file.string(), kMaxTokenizerFileBytes)) fail_tokenizer_json(file, *why);
  std::ifstream in(file, std::ios::binary);
  if (!in) fail_tokenizer_json(file, "cannot open" + relative_path_note(file.string()));
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail_tokenizer_json(file, "not a JSON object");
  return j;
}

bool is_null_or(const json& j, const char* key, const json& allowed) {
  return !j.contains(key) || j[key].is_null() || j[key] == allowed;
}

TokenizerSpec read_hf_tokenizer_spec(const fs::path& file);

// The split pattern of a byte-level pre-tokenizer: Split(regex, Isolated) then ByteLevel without
// its own regex (Llama 3), or ByteLevel with its regex (GPT-2).
std::string split_pattern_of(const json& pre, const fs::path& file) {
  auto refuse = [&](const std::string& why) {
    fail_tokenizer_json(file, "pre_tokenizer: " + why + " (ctitan reads byte-level BPE: Split(Regex, Isolated) + ByteLevel, or ByteLevel)");
  };
  auto byte_level = [&](const json& p, bool want_regex) {
    if (p.value("type", "") != "ByteLevel") refuse("expected ByteLevel, got " + p.value("type", "?"));
    if (p.value("add_prefix_space", false)) refuse("add_prefix_space = true is not supported");
    if (p.value("use_regex", true) != want_regex) refuse("unexpected use_regex");
  };
  if (!pre.is_object()) refuse("missing");
  if (pre.value("type", "") == "ByteLevel") {
    byte_level(pre, /*want_regex=*/true);
    return kGpt2SplitPattern;
  }
  if (pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers") || pre["pretokenizers"].size() != 2) {
    refuse("type " + pre.value("type", "?") + " is not supported");
  }
  const json& split = pre["pretokenizers"][0];
  if (split.value("type", "") != "Split") refuse("expected Split first, got " + split.value("type", "?"));
  if (split.value("behavior", "") != "Isolated" || split.value("invert", false)) {
    refuse("Split must have behavior Isolated and invert false");
  }
  if (!split.contains("pattern")) refuse("Split has no pattern");
  const json& pattern = split["pattern"];
  if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) {
    refuse("Split pattern must be a Regex");
  }
  byte_level(pre["pretokenizers"][1], /*want_regex=*/false);
  return pattern["Regex"].get<std::string>();
}

void check_model_options(const json& model, const fs::path& file) {
  if (model.value("type", "") != "BPE") fail_tokenizer_json(file, "model.type is " + model.value("type", "?") + ", ctitan reads BPE");
  if (!is_null_or(model, "dropout", 0.0) && !is_null_or(model, "dropout", 0)) {
    fail_tokenizer_json(file, "model.dropout is set: BPE dropout is for training-time sampling, not a fixed encoding");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!is_null_or(model, key, "")) fail_tokenizer_json(file, fmt::format("model.{} is set; byte-level BPE uses none", key));
  }
  if (model.value("byte_fallback", false)) fail_tokenizer_json(file, "model.byte_fallback is set; byte-level BPE needs none");
}

// The token's content if `name` is a string or {"content": ...}, else "".
std::string token_text(const json& name) {
  if (name.is_string()) return name.get<std::string>();
  if (name.is_object() && name.contains("content") && name["content"].is_string()) return name["content"].get<std::string>();
  return "";
}

int32_t find_special(const TokenizerSpec& spec, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    for (size_t id = 0; id < spec.tokens.size(); ++id) {
      if (spec.special[id] && spec.tokens[id] == name) return int32_t(id);
    }
  }
  return -1;
}

void choose_bos_eos(TokenizerSpec& spec, const fs::path& file) {
  fs::path config_file = file.parent_path() / "tokenizer_config.json";
  std::string bos, eos;
  if (fs::exists(config_file)) {
    json config = read_json(config_file);
    bos = token_text(config.value("bos_token", json()));
    eos = token_text(config.value("eos_token", json()));
  }
  auto pick = [&](const std::string& configured, std::vector<std::string> defaults, const char* what) {
    if (!configured.empty()) defaults = {configured};
    int32_t id = find_special(spec, defaults);
    if (id < 0) {
      fail_tokenizer_json(file, fmt::format("no {} among added_tokens (looked for '{}'; name it as {} in {})", what,
                             fmt::join(defaults, "', '"), what == std::string("BOS") ? "bos_token" : "eos_token",
                             config_file.string()));
    }
    return id;
  };
  spec.bos_id = pick(bos, {"<|begin_of_text|>", "<s>", "<|endoftext|>"}, "BOS");
  spec.eos_id = pick(eos, {"<|end_of_text|>", "</s>", "<|endoftext|>"}, "EOS");
}

// "left right" (the classic form) or ["left", "right"] (tokenizers >= 0.20).
std::pair<std::string, std::string> merge_sides(const json& merge) {
  if (merge.is_string()) {
    const auto& s = merge.get_ref<const std::string&>();
    size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) return {};
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  return {};
}

// Every split of every token into two tokens, ordered by the merged token's id, then the parts'.
std::vector<std::pair<int32_t, int32_t>> merges_from_ranks(const TokenizerSpec& spec) {
  std::unordered_map<std::string_view, int32_t> id_of;
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (!spec.special[id]) id_of.emplace(spec.tokens[id], int32_t(id));
  }
  std::vector<std::tuple<int32_t, int32_t, int32_t>> merges;  // (result, left, right)
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (spec.special[id]) continue;
    std::string_view token = spec.tokens[id];
    for (size_t cut = 1; cut < token.size(); ++cut) {
      auto left = id_of.find(token.substr(0, cut));
      auto right = id_of.find(token.substr(cut));
      if (left != id_of.end() && right != id_of.end()) merges.emplace_back(int32_t(id), left->second, right->second);
    }
  }
  std::sort(merges.begin(), merges.end());
  std::vector<std::pair<int32_t, int32_t>> out;
  out.reserve(merges.size());
  for (auto [result, left, right] : merges) out.emplace_back(left, right);
  return out;
}

}  // namespace

Tokenizer load_hf_tokenizer_json(const fs::path& file) {
  TokenizerSpec spec;
  try {
    spec = read_hf_tokenizer_spec(file);
  } catch (const json::exception& e) {  // a key of the wrong JSON type (e.g. "type": 3)
    fail_tokenizer_json(file, fmt::format("not a tokenizer.json of byte-level BPE ({})", e.what()));
  }
  try {
    return Tokenizer(std::move(spec));
  } catch (const InputError& e) {
    // The split pattern's checks (pretokenizer.cpp) cannot name the file.
    if (std::string_view(e.what()).find(file.string()) != std::string_view::npos) throw;
    fail_tokenizer_json(file, e.what());
  }
}

namespace {
TokenizerSpec read_hf_tokenizer_spec(const fs::path& file) {
  json j = read_json(file);
  if (!is_null_or(j, "normalizer", json())) fail_tokenizer_json(file, "normalizer is set; byte-level BPE (Llama 3) has none");
  if (!j.contains("model") || !j["model"].is_object()) fail_tokenizer_json(file, "model is missing");
  const json& model = j["model"];
  check_model_options(model, file);

  TokenizerSpec spec;
  spec.source = file.string();
  spec.split_pattern = split_pattern_of(j.value("pre_tokenizer", json()), file);
  spec.ignore_merges = model.value("ignore_merges", false);
  spec.merge_rule = MergeRule::kMergeList;  // even with no merges at all: then nothing merges

  // Ids must be dense: 0..n-1, each naming one token, from the vocab or added_tokens.
  std::map<int64_t, std::pair<std::string, bool>> by_id;  // id -> (bytes or text, special)
  if (!model.contains("vocab")) fail_tokenizer_json(file, "model.vocab is missing");
  if (!model["vocab"].is_object()) {
    fail_tokenizer_json(file, fmt::format("model.vocab must be an object of token -> id (got {}: only BPE models are supported)",
                           model["vocab"].type_name()));
  }
  std::unordered_map<std::string, int32_t> id_of_spelling;
  for (const auto& [spelling, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) fail_tokenizer_json(file, fmt::format("model.vocab['{}'] is not an id", spelling));
    auto bytes = byte_level_decode(spelling);
    if (!bytes) fail_tokenizer_json(file, fmt::format("model.vocab['{}'] is not byte-level text", spelling));
    if (!by_id.emplace(id.get<int64_t>(), std::pair{*bytes, false}).second) {
      fail_tokenizer_json(file, fmt::format("model.vocab: id {} is given twice", id.get<int64_t>()));
    }
    id_of_spelling.emplace(spelling, int32_t(id.get<int64_t>()));
  }
  for (const auto& added : j.value("added_tokens", json::array())) {
    if (!added.contains("id") || !added["id"].is_number_integer() || token_text(added).empty()) {
      fail_tokenizer_json(file, "added_tokens: an entry lacks an integer id or a content");
    }
    // An added token is matched in text before BPE by Hugging Face, never produced by merges;
    // when the trainer also put it in the vocab, the added entry wins.
    by_id[added["id"].get<int64_t>()] = {token_text(added), true};
  }
  int64_t expected = 0;
  for (const auto& [id, entry] : by_id) {
    if (id != expected) fail_tokenizer_json(file, fmt::format("no token has id {} (ids must run 0..{} without gaps)", expected, by_id.size() - 1));
    spec.tokens.push_back(entry.first);
    spec.special.push_back(entry.second);
    ++expected;
  }

  const json merges = model.value("merges", json::array());
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    auto [left, right] = merge_sides(merges[i]);
    auto l = id_of_spelling.find(left), r = id_of_spelling.find(right);
    if (left.empty() || l == id_of_spelling.end() || r == id_of_spelling.end()) {
      fail_tokenizer_json(file, fmt::format("model.merges[{}] is not a pair of vocabulary tokens", i));
    }
    spec.merges.emplace_back(l->second, r->second);
  }
  choose_bos_eos(spec, file);
  return spec;
}
}  // namespace

json hf_tokenizer_json(const Tokenizer& tokenizer) {
  const TokenizerSpec& spec = tokenizer.spec();
  json vocab = json::object(), added = json::array(), merges = json::array();
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (spec.special[id]) {
      added.push_back({{"id", id}, {"content", spec.tokens[id]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
    } else {
      vocab[byte_level_encode(spec.tokens[id])] = id;
    }
  }
  for (auto [left, right] : spec.merge_rule == MergeRule::kTiktoken ? merges_from_ranks(spec) : spec.merges) {
    merges.push_back(byte_level_encode(spec.tokens[size_t(left)]) + " " + byte_level_encode(spec.tokens[size_t(right)]));
  }
  const std::string& bos = spec.tokens[size_t(spec.bos_id)];
  // As Llama 3's: encode(text) in `tokenizers`/`transformers` prepends BOS, as ctitan's loader does.
  json post = {{"type", "TemplateProcessing"},
               {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
               {"pair",
                {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                 {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                 {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
               {"special_tokens", {{bos, {{"id", bos}, {"ids", {spec.bos_id}}, {"tokens", {bos}}}}}}};
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", spec.split_pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", post},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", spec.ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

void write_hf_tokenizer_files(const Tokenizer& tokenizer, const fs::path& dir) {
  const TokenizerSpec& spec = tokenizer.spec();
  write_json_file(dir / "tokenizer.json", hf_tokenizer_json(tokenizer));
  json added_decoder = json::object();
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (!spec.special[id]) continue;
    added_decoder[std::to_string(id)] = {{"content", spec.tokens[id]}, {"lstrip", false}, {"normalized", false},
                                         {"rstrip", false}, {"single_word", false}, {"special", true}};
  }
  write_json_file(dir / "tokenizer_config.json",
                  {{"tokenizer_class", "PreTrainedTokenizerFast"},
                   {"bos_token", spec.tokens[size_t(spec.bos_id)]},
                   {"eos_token", spec.tokens[size_t(spec.eos_id)]},
                   // Decoding gives back the exact text: no space clean-up around punctuation.
                   {"clean_up_tokenization_spaces", false},
                   {"model_input_names", {"input_ids", "attention_mask"}},
                   {"added_tokens_decoder", added_decoder}});
  write_json_file(dir / "generation_config.json", {{"bos_token_id", spec.bos_id}, {"eos_token_id", spec.eos_id}});
}

}  // namespace ctitan::data
