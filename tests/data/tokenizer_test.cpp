// Tests for base64, Pretokenizer, Tokenizer and train_bpe. Every text is generated here.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/data/base64.h"
#include "ctitan/data/bpe_trainer.h"
#include "ctitan/data/pretokenizer.h"
#include "ctitan/data/tokenizer.h"
#include "support/test_support.h"

namespace ctitan::data {
namespace {

using testing::make_corpus;

// The 256 single bytes in byte order: ranks 0..255 = byte values.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  return tokens;
}

// tiktoken's encoder as written in its Rust core: rescan all adjacent pairs, merge the leftmost
// pair with the lowest rank, repeat. Quadratic, but obviously right; Tokenizer must agree with it.
std::vector<int32_t> reference_encode(const Tokenizer& tok, std::string_view text) {
  std::unordered_map<std::string, int32_t> ranks;
  for (int32_t r = 0; r < tok.n_base(); ++r) ranks[tok.decode({r})] = r;
  std::vector<int32_t> ids;
  for (std::string_view piece : Pretokenizer().split(text)) {
    if (auto it = ranks.find(std::string(piece)); it != ranks.end()) {
      ids.push_back(it->second);
      continue;
    }
    std::vector<std::string> parts;
    for (char c : piece) parts.emplace_back(1, c);
    while (true) {
      int32_t best_rank = -1;
      size_t best = 0;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        auto it = ranks.find(parts[i] + parts[i + 1]);
        if (it != ranks.end() && (best_rank < 0 || it->second < best_rank)) {
          best_rank = it->second;
          best = i;
        }
      }
      if (best_rank < 0) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + static_cast<long>(best) + 1);
    }
    for (const auto& part : parts) ids.push_back(ranks.at(part));
  }
  return ids;
}

// BPE training without incremental bookkeeping: recount every pair before each merge. Same tie
// rule as train_bpe (highest count, then smallest (left bytes, right bytes)); train_bpe's lazy
// heap and per-pair word lists must give exactly these ranks.
std::vector<std::string> reference_train(const std::vector<std::string>& texts, size_t n_ranks) {
  std::map<std::string, int64_t> piece_counts;
  for (const auto& text : texts) {
    for (std::string_view piece : Pretokenizer().split(text)) ++piece_counts[std::string(piece)];
  }
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;  // (tokens, count)
  for (const auto& [piece, count] : piece_counts) {
    std::vector<std::string> parts;
    for (char c : piece) parts.emplace_back(1, c);
    words.emplace_back(parts, count);
  }
  std::vector<std::string> tokens = byte_tokens();
  std::set<std::string> known(tokens.begin(), tokens.end());
  while (tokens.size() < n_ranks) {
    std::map<std::pair<std::string, std::string>, int64_t> pair_counts;
    for (const auto& [parts, count] : words) {
      for (size_t k = 0; k + 1 < parts.size(); ++k) pair_counts[{parts[k], parts[k + 1]}] += count;
    }
    if (pair_counts.empty()) break;
    // std::map iterates pairs in (left, right) order, so the first maximum wins ties.
    auto best = pair_counts.begin();
    for (auto it = pair_counts.begin(); it != pair_counts.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    const auto [left, right] = best->first;
    if (known.insert(left + right).second) tokens.push_back(left + right);
    for (auto& [parts, count] : words) {
      std::vector<std::string> merged;
      for (size_t k = 0; k < parts.size(); ++k) {
        if (k + 1 < parts.size() && parts[k] == left && parts[k + 1] == right) {
          merged.push_back(left + right);
          ++k;
        } else {
          merged.push_back(parts[k]);
        }
      }
      parts = merged;
    }
  }
  return tokens;
}

using testing::read_file;

using testing::write_file;

// Texts every tokenizer must round-trip byte for byte.
const std::vector<std::string> kRoundTripTexts = {
    "",
    "Hello, world!",
    "café naïve Ångström façade",
    "日本語のテキストと中文",
    "emoji 😀👍🏽 and flags 🇫🇷 and ZWJ 👨‍👩‍👧",
    "   leading and trailing   ",
    "tabs\tand\t\ttabs",
    "line one\nline two\r\nline three\n\n\n",
    "12345 and 1234567 and 3.14159",
    "don't we're I'LL they've she'd it's",
    std::string("nul \0 byte", 10),
    "\xff\xfe invalid \xc3 utf-8 \xe2\x82",
};

class TrainedTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tokenizer_ = new Tokenizer(train_bpe(make_corpus(), {600})); }
  static void TearDownTestSuite() { delete tokenizer_; }
  static Tokenizer* tokenizer_;
};
Tokenizer* TrainedTokenizer::tokenizer_ = nullptr;

// A fresh directory per test, removed afterwards.
class TokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ctitan_tokenizer_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes the 256 byte tokens as rank lines, then `extra`; returns the path.
  std::string write_rank_file(const std::string& name, const std::string& extra) {
    std::string contents;
    for (int b = 0; b < 256; ++b) {
      contents +=
          base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
    }
    std::string path = dir_ + "/" + name;
    write_file(path, contents + extra);
    return path;
  }

  // Loading `path` must throw InputError whose message names `location` ("path" or "path:line").
  static void expect_load_error(const std::string& path, const std::string& location,
                                const std::string& detail) {
    try {
      Tokenizer::load(path);
      ADD_FAILURE() << "loading " << path << " did not throw";
    } catch (const InputError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(location + ":"), std::string::npos) << message;
      EXPECT_NE(message.find(detail), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }

  std::string dir_;
};

TEST(Base64, KnownVectorsRoundTrip) {
  // RFC 4648 §10 test vectors.
  const std::vector<std::pair<std::string, std::string>> vectors = {{"", ""},
                                                                    {"f", "Zg=="},
                                                                    {"fo", "Zm8="},
                                                                    {"foo", "Zm9v"},
                                                                    {"foob", "Zm9vYg=="},
                                                                    {"fooba", "Zm9vYmE="},
                                                                    {"foobar", "Zm9vYmFy"},
                                                                    {std::string(1, '\0'), "AA=="}};
  for (const auto& [bytes, text] : vectors) {
    EXPECT_EQ(base64_encode(bytes), text);
    EXPECT_EQ(base64_decode(text), bytes);
  }
  std::string all;
  for (int b = 255; b >= 0; --b) all += static_cast<char>(b);
  EXPECT_EQ(base64_decode(base64_encode(all)), all);
}

TEST(Base64, RejectsInvalid) {
  for (const char* bad :
       {"Zg=", "Zg", "Zg=a", "Z===", "====", "Zm9v!A==", "Zh==", "Zm9=", " Zg="}) {
    EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
  }
}

TEST(Pretokenizer, SplitsLikeLlama3) {
  Pretokenizer p;
  using Pieces = std::vector<std::string_view>;
  // Digits go in groups of at most 3; contractions split off case-insensitively; a space sticks
  // to the following word; a whitespace run before a word leaves its last space to that word.
  EXPECT_EQ(p.split("12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(p.split("I'LL don't"), (Pieces{"I", "'LL", " don", "'t"}));
  EXPECT_EQ(p.split("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(p.split("x!!\n\ny"), (Pieces{"x", "!!\n\n", "y"}));
  EXPECT_EQ(p.split("a \n\n b"), (Pieces{"a", " \n\n", " b"}));
  EXPECT_EQ(p.split("end  "), (Pieces{"end", "  "}));
}

TEST(Pretokenizer, InvalidUtf8BecomesItsOwnPiece) {
  Pretokenizer p;
  std::string text = "ab\xff\xfe cd \xc3";
  auto pieces = p.split(text);
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"ab", "\xff\xfe", " cd", " ", "\xc3"}));
}

TEST(Pretokenizer, HugeWhitespaceRun) {
  // Needs more backtracking than PCRE2's default match limit allows.
  std::string text(20'000'000, ' ');
  auto pieces = Pretokenizer().split(text);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].size(), text.size());
}

// A split pattern that backtracks exponentially (a tokenizer.json can carry any) stops at PCRE2's
// match limit, and the error names the file it came from, not only PCRE2's words.
TEST(Pretokenizer, CatastrophicBacktrackingNamesTheTokenizerFile) {
  auto spec = Tokenizer::from_ranks(byte_tokens()).spec();
  spec.split_pattern = "(a|aa)+$";
  spec.source = "evil/tokenizer.json";
  Tokenizer tok(spec);
  try {
    tok.encode(std::string(64, 'a') + "!", false, false);
    FAIL() << "a pattern past the match limit was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("evil/tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST_F(TrainedTokenizer, RoundTrips) {
  for (const auto& text : kRoundTripTexts) {
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text, false, false)), text) << text;
  }
}

TEST(BytesOnlyTokenizer, RoundTripsOneIdPerByte) {
  Tokenizer tok = Tokenizer::from_ranks(byte_tokens());
  for (const auto& text : kRoundTripTexts) {
    auto ids = tok.encode(text, false, false);
    EXPECT_EQ(ids.size(), text.size());
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST_F(TrainedTokenizer, MatchesReferenceEncoder) {
  std::vector<std::string> texts = kRoundTripTexts;
  texts.push_back(make_corpus()[0]);
  // Long single pieces, where the heap-based merge differs most from the reference's rescans.
  std::string letters;
  for (int i = 0; i < 300; ++i) letters += "hellotheworld";
  texts.push_back(letters);
  texts.push_back(std::string(3000, ' '));
  for (const auto& text : texts) {
    EXPECT_EQ(tokenizer_->encode(text, false, false), reference_encode(*tokenizer_, text));
  }
}

TEST_F(TrainedTokenizer, BosAndEosAtEnds) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.bos_id(), tok.n_base());
  EXPECT_EQ(tok.eos_id(), tok.n_base() + 1);
  EXPECT_EQ(tok.vocab_size(), tok.n_base() + 2);

  auto plain = tok.encode("hello world", false, false);
  auto both = tok.encode("hello world", true, true);
  ASSERT_EQ(both.size(), plain.size() + 2);
  EXPECT_EQ(both.front(), tok.bos_id());
  EXPECT_EQ(both.back(), tok.eos_id());
  EXPECT_EQ(std::vector<int32_t>(both.begin() + 1, both.end() - 1), plain);
  EXPECT_EQ(tok.encode("", true, false), std::vector<int32_t>{tok.bos_id()});
  EXPECT_EQ(tok.decode(both), "<|begin_of_text|>hello world<|end_of_text|>");
}

TEST_F(TrainedTokenizer, DecodeRejectsOutOfRangeIds) {
  EXPECT_THROW(tokenizer_->decode({static_cast<int32_t>(tokenizer_->vocab_size())}), InputError);
  EXPECT_THROW(tokenizer_->decode({-1}), InputError);
}

TEST_F(TrainedTokenizer, LearnsFrequentWords) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.vocab_size(), 600);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tok.decode({b}), std::string(1, static_cast<char>(b)));
  // "hello" and "world" are the two most frequent words of the corpus.
  EXPECT_LT(tok.encode("hello", false, false).size(), 5u);
  EXPECT_EQ(tok.encode(" hello", false, false).size(), 1u);
  EXPECT_EQ(tok.encode(" world", false, false).size(), 1u);
}

TEST_F(TrainedTokenizer, TrainingIsDeterministic) {
  Tokenizer again = train_bpe(make_corpus(), {600});
  ASSERT_EQ(again.n_base(), tokenizer_->n_base());
  for (int32_t r = 0; r < again.n_base(); ++r) {
    ASSERT_EQ(again.decode({r}), tokenizer_->decode({r})) << "rank " << r;
  }
}

TEST_F(TrainedTokenizer, MatchesReferenceTrainer) {
  std::vector<std::string> expected = reference_train(make_corpus(), tokenizer_->n_base());
  ASSERT_EQ(static_cast<int64_t>(expected.size()), tokenizer_->n_base());
  for (int32_t r = 0; r < tokenizer_->n_base(); ++r) {
    ASSERT_EQ(tokenizer_->decode({r}), expected[r]) << "rank " << r;
  }
}

TEST(BpeTrainer, RejectsBadOptions) {
  EXPECT_THROW(train_bpe(make_corpus(), {258}), InputError);
  EXPECT_THROW(train_bpe({}, {1000}), InputError);
  EXPECT_THROW(train_bpe({"", ""}, {1000}), InputError);
}

TEST(BpeTrainer, StopsWhenNothingIsLeftToMerge) {
  // "abab" allows merges "ab" then "abab" only, however large the requested vocabulary.
  Tokenizer tok = train_bpe({"abab"}, {1000});
  EXPECT_EQ(tok.n_base(), 258);
  EXPECT_EQ(tok.encode("abab", false, false), std::vector<int32_t>{257});
}

TEST_F(TokenizerFiles, SaveThenLoadGivesSameEncodings) {
  Tokenizer tok = train_bpe(make_corpus(), {400});
  std::string path = dir_ + "/tok.model";
  tok.save(path);

  std::string contents = read_file(path);
  // Rank order, "<base64> <rank>" per line: rank 0 is byte 0x00, rank 65 is 'A'.
  EXPECT_EQ(contents.substr(0, 14), "AA== 0\nAQ== 1\n");
  EXPECT_NE(contents.find("\nQQ== 65\n"), std::string::npos);
  EXPECT_EQ(std::count(contents.begin(), contents.end(), '\n'), 398);
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());

  Tokenizer loaded = Tokenizer::load(path);
  EXPECT_EQ(loaded.vocab_size(), tok.vocab_size());
  for (const auto& text : kRoundTripTexts) {
    EXPECT_EQ(loaded.encode(text, true, true), tok.encode(text, true, true));
  }
  EXPECT_EQ(loaded.encode(make_corpus()[3], false, false),
            tok.encode(make_corpus()[3], false, false));
}

TEST_F(TokenizerFiles, HandwrittenRankFile) {
  // Merges, in rank order: "he" 256, "ll" 257, "hell" 258, "el" 259, and "xyz" 260, which no
  // merge can build. Lines are written in reverse rank order, which the format allows.
  std::vector<std::string> tokens = byte_tokens();
  for (const char* t : {"he", "ll", "hell", "el", "xyz"}) tokens.push_back(t);
  std::string contents;
  for (size_t r = tokens.size(); r-- > 0;) {
    contents += base64_encode(tokens[r]) + " " + std::to_string(r) + "\n";
  }
  std::string path = dir_ + "/hand.model";
  write_file(path, contents);
  Tokenizer tok = Tokenizer::load(path);
  EXPECT_EQ(tok.n_base(), 261);
  EXPECT_EQ(tok.bos_id(), 261);
  EXPECT_EQ(tok.eos_id(), 262);

  using Ids = std::vector<int32_t>;
  // "hello": pairs he(256) el(259) ll(257) lo(-). Lowest rank first: he -> [he l l o];
  // then ll(257) -> [he ll o]; then he+ll = hell(258) -> [hell o]; "hello" is not a token.
  EXPECT_EQ(tok.encode("hello", false, false), (Ids{258, 'o'}));
  // "yell": el(259) and ll(257) overlap; ll has the lower rank and wins, leaving "e" alone,
  // and "ell" is not a token: [y e ll].
  EXPECT_EQ(tok.encode("yell", false, false), (Ids{'y', 'e', 257}));
  // "help": he(256) beats el(259); "hel" is not a token: [he l p].
  EXPECT_EQ(tok.encode("help", false, false), (Ids{256, 'l', 'p'}));
  // A piece that is itself a token is taken whole, though no merge path reaches "xyz";
  // "xyzz" is not a token and has no mergeable pair, so it stays bytes.
  EXPECT_EQ(tok.encode("xyz", false, false), (Ids{260}));
  EXPECT_EQ(tok.encode("xyzz", false, false), (Ids{'x', 'y', 'z', 'z'}));
  // Two pieces, "hello" and " hell": the space is a byte of its own since " h" is no token.
  EXPECT_EQ(tok.encode("hello hell", true, true), (Ids{261, 258, 'o', ' ', 258, 262}));
}

TEST_F(TokenizerFiles, CorruptFilesNameFileAndLine) {
  // The 256 byte lines occupy lines 1..256, so extra lines start at 257.
  std::string p = write_rank_file("bad_base64", "aGk 256\n");
  expect_load_error(p, p + ":257", "invalid base64 'aGk'");

  p = write_rank_file("duplicate_rank", "aGk= 256\naGV5 256\n");
  expect_load_error(p, p + ":258", "rank 256 already given on line 257");

  // Ranks 256 and 258 with no 257: two extra lines allow ranks up to 257 only.
  p = write_rank_file("missing_rank", "aGk= 256\naGV5 258\n");
  expect_load_error(p, p + ":258", "rank 258 is out of range");

  p = write_rank_file("non_numeric", "aGk= 25x\n");
  expect_load_error(p, p + ":257", "rank '25x' is not a number");

  p = write_rank_file("no_rank", "aGk=\n");
  expect_load_error(p, p + ":257", "expected '<base64 token> <rank>'");

  p = write_rank_file("duplicate_bytes", "QQ== 256\n");  // "A" again
  expect_load_error(p, p + ":257", "already has rank 65");

  // Byte 0x41 ('A', line 66) replaced by "hi": the file is well formed but cannot encode "A".
  std::string contents = read_file(write_rank_file("tmp", ""));
  contents.replace(contents.find("QQ== 65"), 7, "aGk= 65");
  p = dir_ + "/missing_byte";
  write_file(p, contents);
  expect_load_error(p, p, "no token for byte 0x41");

  p = dir_ + "/empty";
  write_file(p, "\n\n");
  expect_load_error(p, p, "empty file");

  p = dir_ + "/does_not_exist";
  expect_load_error(p, p, "cannot open");

  // A relative path says which directory it was resolved against.
  expect_load_error("no_such_dir/tokenizer.model",
                    "no_such_dir/tokenizer.model (relative to " + std::filesystem::current_path().string() + ")",
                    "cannot open");
}

TEST(TokenizerFromRanks, RejectsBadVocabularies) {
  auto tokens = byte_tokens();
  tokens.push_back("");
  EXPECT_THROW(Tokenizer::from_ranks(tokens), InputError);
  tokens.back() = "a";
  EXPECT_THROW(Tokenizer::from_ranks(tokens), InputError);
  tokens.pop_back();
  tokens.pop_back();
  EXPECT_THROW(Tokenizer::from_ranks(tokens), InputError);
}

TEST_F(TrainedTokenizer, EncodeIsThreadSafe) {
  const std::string text = make_corpus()[5];
  const auto expected = tokenizer_->encode(text, false, false);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) {
    threads.emplace_back([&] { result = tokenizer_->encode(text, false, false); });
  }
  for (auto& t : threads) t.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

// #34: a tokenizer path to a device grew memory until the OOM killer; refused by name, whichever
// loader the path reaches (a tiktoken rank file, or a tokenizer.json by its name).
TEST(Tokenizer, ADeviceAsTheTokenizerIsNamed) {
  for (const std::string path : {"/dev/zero", "/dev/urandom"}) {
    try {
      Tokenizer::load(path);
      FAIL() << path << " was read";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(path + ": is not a regular file (a character device)"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace ctitan::data
