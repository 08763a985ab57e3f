// tokenizer.json read and written by ctitan, checked against Hugging Face's own libraries
// (tests/data/hf_tokenizers_reference.py): ids must be equal exactly, token for token.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ctitan/common/error.h"
#include "ctitan/data/bpe_trainer.h"
#include "ctitan/data/byte_level.h"
#include "ctitan/data/hf_tokenizer_json.h"
#include "ctitan/data/tokenizer.h"
#include "support/test_support.h"

namespace ctitan::data {
namespace {

using testing::TempDir;
const char* kNoTokenizersPython = "no venv Python: Hugging Face's tokenizers library is the reference";
const std::string kTokenizersScript = std::string(CTITAN_SOURCE_DIR) + "/tests/data/hf_tokenizers_reference.py";

// The corpus as the script reads it, with the split pattern ctitan uses (the very string, so
// both sides split alike by construction and the test is about BPE and the file format).
std::string write_corpus(const TempDir& dir) {
  auto path = dir.file("corpus.json");
  testing::write_file(path, nlohmann::json{{"docs", testing::make_corpus()}, {"pattern", kLlama3SplitPattern}}.dump());
  return path;
}

std::vector<std::vector<int32_t>> encode_all(const Tokenizer& tok) {
  std::vector<std::vector<int32_t>> ids;
  for (const auto& doc : testing::make_corpus()) ids.push_back(tok.encode(doc, false, false));
  return ids;
}

TEST(ByteLevel, SpellsEveryByteAndBack) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  EXPECT_EQ(byte_level_decode(byte_level_encode(all)), all);
  EXPECT_EQ(byte_level_encode(" hi\n"), "\xC4\xA0hi\xC4\x8A");  // GPT-2's 'Ġhi' and 'Ċ'
  EXPECT_FALSE(byte_level_decode("\xE4\xB8\xAD").has_value());      // U+4E2D is outside the alphabet
}

// A tokenizer.json that Hugging Face's trainer wrote, in the Llama 3 form (Split + ByteLevel,
// ignore_merges) with the specials at ids 0 and 1 as its trainer places them, and in the GPT-2
// form (ByteLevel's own regex, merges without ignore_merges, one <|endoftext|>): ctitan's ids
// for every document equal `tokenizers`'.
TEST(HfTokenizerJson, ReadsWhatTokenizersWritesWithEqualIds) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTokenizersPython;
  TempDir dir;
  auto corpus = write_corpus(dir);
  for (std::string style : {"llama3", "gpt2"}) {
    SCOPED_TRACE(style);
    auto out = dir.path() / style;
    std::filesystem::create_directories(out);
    auto r = testing::run_python({kTokenizersScript, "train", corpus, style, "700", out.string()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Tokenizer tok = Tokenizer::load(out.string());  // a directory with tokenizer.json
    auto expected = nlohmann::json::parse(testing::read_file((out / "ids.json").string()))["ids"];
    auto ids = encode_all(tok);
    ASSERT_EQ(ids.size(), expected.size());
    for (size_t d = 0; d < ids.size(); ++d) {
      ASSERT_EQ(ids[d], expected[d].get<std::vector<int32_t>>()) << "document " << d;
    }
    EXPECT_EQ(tok.vocab_size(), 700);
    if (style == "llama3") {
      EXPECT_EQ(tok.bos_id(), 0);
      EXPECT_EQ(tok.eos_id(), 1);
    } else {
      EXPECT_EQ(tok.bos_id(), tok.eos_id());  // GPT-2 has one <|endoftext|>
    }
    EXPECT_EQ(tok.decode(ids[0]), testing::make_corpus()[0]);
  }
}

// A tokenizer ctitan trained (tiktoken rank format) written as tokenizer.json: `tokenizers`
// encodes every document as ctitan does, transformers' AutoTokenizer loads the directory with
// ctitan's BOS/EOS and prepends BOS; ctitan reads its own tokenizer.json back (Hugging Face's
// merge rule now) with the same ids.
TEST(HfTokenizerJson, WritesWhatTokenizersAndTransformersReadWithEqualIds) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTokenizersPython;
  TempDir dir;
  Tokenizer tok = train_bpe(testing::make_corpus(), {700});
  write_hf_tokenizer_files(tok, dir.path());
  auto corpus = write_corpus(dir);
  auto r = testing::run_python({kTokenizersScript, "encode", corpus, dir.path().string(), dir.file("out.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto out = nlohmann::json::parse(testing::read_file(dir.file("out.json")));
  auto ids = encode_all(tok);
  ASSERT_EQ(out["ids"].size(), ids.size());
  for (size_t d = 0; d < ids.size(); ++d) {
    ASSERT_EQ(ids[d], out["ids"][d].get<std::vector<int32_t>>()) << "document " << d;
  }
  EXPECT_EQ(out["bos_token_id"], tok.bos_id());
  EXPECT_EQ(out["eos_token_id"], tok.eos_id());
  EXPECT_EQ(out["vocab_size"], tok.vocab_size());
  auto with_bos = ids[0];
  with_bos.insert(with_bos.begin(), tok.bos_id());
  EXPECT_EQ(out["auto_first_ids"].get<std::vector<int32_t>>(), with_bos);
  EXPECT_EQ(out["auto_first_decoded"], testing::make_corpus()[0]);

  Tokenizer again = Tokenizer::load(dir.file("tokenizer.json"));
  EXPECT_FALSE(again.spec().merges.empty());
  EXPECT_EQ(encode_all(again), ids);
  EXPECT_FALSE(again.fits_tiktoken_format());  // it carries a merge list now
}

// The rules a trained vocabulary never exercises, on a hand-made tokenizer.json: merges in the
// array form; a duplicated merge (the later one counts: (b, c) ranks after (a, b), so "abc"
// becomes [ab][c], not [a][bc]); ignore_merges (on: the piece "abc", a token that no merge
// makes, is taken whole; off: merges decide); an empty merge list (nothing merges at all).
TEST(HfTokenizerJson, MergeRulesMatchTokenizersOnAHandMadeFile) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTokenizersPython;
  TempDir dir;
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  vocab["bc"] = 257;
  vocab["abc"] = 258;
  nlohmann::json added = nlohmann::json::array();
  for (auto [id, text] : {std::pair{259, "<|begin_of_text|>"}, std::pair{260, "<|end_of_text|>"}}) {
    added.push_back({{"id", id}, {"content", text}, {"special", true}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}});
  }
  const std::vector<std::string> docs = {"abc", "abc abc", "xabcab", "bcab abcabc", "ab\nbc"};
  testing::write_file(dir.file("corpus.json"), nlohmann::json{{"docs", docs}}.dump());
  using Json = nlohmann::json;
  const Json merge_lists[] = {
      // array form, with (b, c) duplicated
      Json::array({Json::array({"b", "c"}), Json::array({"a", "b"}), Json::array({"b", "c"})}),
      Json::array(),  // no merges
  };
  int case_no = 0;
  for (const auto& merges : merge_lists) {
    for (bool ignore_merges : {true, false}) {
      SCOPED_TRACE(fmt::format("merges {} ignore_merges {}", merges.dump(), ignore_merges));
      nlohmann::json j = {
          {"version", "1.0"}, {"added_tokens", added}, {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3SplitPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merges}}}};
      auto path = dir.file(fmt::format("case{}.json", case_no++));
      testing::write_file(path, j.dump());
      auto r = testing::run_python({kTokenizersScript, "ids", dir.file("corpus.json"), path, dir.file("ids.json")});
      ASSERT_EQ(r.exit_code, 0) << r.output;
      auto expected = nlohmann::json::parse(testing::read_file(dir.file("ids.json")))["ids"];
      Tokenizer tok = Tokenizer::load(path);
      for (size_t d = 0; d < docs.size(); ++d) {
        EXPECT_EQ(tok.encode(docs[d], false, false), expected[d].get<std::vector<int32_t>>()) << docs[d];
      }
    }
  }
}

// Without Python: the written file round-trips through ctitan's reader.
TEST(HfTokenizerJson, RoundTripsWithoutPython) {
  TempDir dir;
  Tokenizer tok = train_bpe(testing::make_corpus(), {400});
  write_hf_tokenizer_files(tok, dir.path());
  Tokenizer again = Tokenizer::load(dir.path().string());
  EXPECT_EQ(again.vocab_size(), tok.vocab_size());
  EXPECT_EQ(again.bos_id(), tok.bos_id());
  EXPECT_EQ(encode_all(again), encode_all(tok));
  auto generation = nlohmann::json::parse(testing::read_file(dir.file("generation_config.json")));
  EXPECT_EQ(generation["eos_token_id"], tok.eos_id());
}

// What ctitan cannot encode faithfully is refused with one line naming the key.
TEST(HfTokenizerJson, RefusesWhatItWouldEncodeDifferently) {
  TempDir dir;
  Tokenizer tok = train_bpe(testing::make_corpus(), {300});
  const auto good = hf_tokenizer_json(tok);
  auto expect_refused = [&](nlohmann::json j, const std::string& detail) {
    auto path = dir.file("tokenizer.json");
    testing::write_file(path, j.dump());
    try {
      Tokenizer::load(path);
      ADD_FAILURE() << "accepted: " << detail;
    } catch (const InputError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_NE(message.find(detail), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  };
  auto j = good;
  j["normalizer"] = {{"type", "NFC"}};
  expect_refused(j, "normalizer");
  j = good;
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_refused(j, "pre_tokenizer");
  j = good;
  j["model"]["type"] = "Unigram";
  expect_refused(j, "model.type");
  j = good;
  j["model"]["dropout"] = 0.1;
  expect_refused(j, "model.dropout");
  j = good;
  j["model"]["merges"].push_back("notatoken x");
  expect_refused(j, "model.merges[");
  j = good;
  j["model"]["vocab"].erase(byte_level_encode("A"));
  expect_refused(j, "no token has id");
  j = good;
  j["added_tokens"] = nlohmann::json::array();
  expect_refused(j, "no BOS");
  expect_refused(nullptr, "not a JSON object");
  // Found while writing fuzz/hf_tokenizer_json_fuzzer (corpus regress_*): a key of the wrong JSON
  // type escaped as nlohmann::json::type_error (terminate), and the split pattern's errors did
  // not name the file.
  j = good;
  j["model"]["type"] = 3;
  expect_refused(j, "type must be string");
  j = good;
  j["pre_tokenizer"]["pretokenizers"] = {{"a", 1}, {"b", 2}};
  expect_refused(j, "cannot use operator[]");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\n";
  expect_refused(j, "split pattern does not compile");
}

}  // namespace
}  // namespace ctitan::data
