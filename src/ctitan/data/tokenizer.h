#pragma once
// Tokenizer: byte-level BPE as Llama 3 ships it, read from either of its two files: a tiktoken
// rank file (`tokenizer.model`) or a Hugging Face `tokenizer.json`. Special tokens (BOS, EOS and
// any others) have ids of their own and are never produced from text.
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ctitan/data/pretokenizer.h"

namespace ctitan::data {

// tiktoken's: any adjacent pair whose concatenation is a token merges, lowest resulting id
// first. Hugging Face's: only the listed (left id, right id) pairs merge, earliest first.
enum class MergeRule { kTiktoken, kMergeList };

// Everything that defines a tokenizer, as both file formats describe it.
struct TokenizerSpec {
  std::vector<std::string> tokens;  // id -> token bytes, or a special token's text
  std::vector<bool> special;        // id -> special (never produced by BPE), same length
  MergeRule merge_rule = MergeRule::kTiktoken;
  std::vector<std::pair<int32_t, int32_t>> merges;  // kMergeList only; a later duplicate wins
  // A pre-tokenized piece that is itself a token is taken whole (tiktoken always; HF's
  // `ignore_merges`, which Llama 3's tokenizer.json sets).
  bool ignore_merges = true;
  std::string split_pattern = kLlama3SplitPattern;
  int32_t bos_id = -1, eos_id = -1;
  std::string source;  // the file it came from, for error messages
};

struct MergeScratch;  // per-encode() working memory, tokenizer.cpp

class Tokenizer {
 public:
  // `path` is a tiktoken rank file, a tokenizer.json, or a directory holding tokenizer.json or
  // tokenizer.model (as a Hugging Face model directory does). Throws ctitan::InputError naming
  // the file and line or key at fault.
  static Tokenizer load(const std::string& path);
  // A tiktoken rank file: one "<base64 token bytes> <rank>" per line, in any order, with every
  // rank 0..n-1 exactly once and every single byte among the tokens; BOS and EOS get ids n, n+1
  // (Llama 3: 128000, 128001). Blank lines are skipped, as tiktoken does.
  static Tokenizer load_tiktoken(const std::string& path);
  // token_bytes_by_rank[r] holds the bytes of rank r; BOS and EOS follow. Same checks as load().
  static Tokenizer from_ranks(std::vector<std::string> token_bytes_by_rank);
  // Validates `spec` (dense ids, all 256 bytes present, merges well formed, BOS/EOS special).
  explicit Tokenizer(TokenizerSpec spec);

  // Writes the rank-file format. Only a tokenizer with tiktoken's merge rule and exactly BOS,
  // EOS after the base ranks fits it; others throw InputError (write tokenizer.json instead).
  // The file appears complete or not at all: it is written beside `path` and renamed over it.
  void save(const std::string& path) const;
  bool fits_tiktoken_format() const;

  // Text is encoded as plain bytes: "<|begin_of_text|>" inside `text` is not the BOS token.
  // (Hugging Face's encode() would match special tokens' text; training data must not.)
  std::vector<int32_t> encode(std::string_view text, bool bos, bool eos) const;
  // Special tokens decode to their text. Throws ctitan::InputError on an id outside
  // [0, vocab_size()). The result may end in the middle of a UTF-8 character if `ids` does.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  int64_t vocab_size() const { return static_cast<int64_t>(spec_.tokens.size()); }
  bool is_special(int64_t id) const { return spec_.special.at(static_cast<size_t>(id)); }
  // Tokens BPE can produce (all but the specials).
  int64_t n_base() const { return n_base_; }
  const TokenizerSpec& spec() const { return spec_; }
  // 16 hex digits over the vocabulary (each id's bytes, which ids are special, BOS and EOS): what
  // token ids mean, which a checkpoint's model and dataloader position depend on. Merge rules,
  // the split pattern and the path are left out: a moved file matches, and so do the rank file and
  // the tokenizer.json that `ctitan tokenizer convert` writes of it. Files that list other
  // specials differ (Meta's Llama 3 tokenizer.model, loaded with BOS and EOS only, and HF's
  // tokenizer.json with its 256 reserved specials have different vocabularies).
  std::string fingerprint() const;

 private:
  struct PairMerge {
    int32_t priority;  // lower merges first
    int32_t result;    // id of the merged token
  };
  // `key` is scratch space for the joined bytes (tiktoken rule), reused across lookups.
  PairMerge merge_of(int32_t left_id, int32_t right_id, std::string_view joined, std::string& key) const;
  void merge_piece(std::string_view piece, MergeScratch& s, std::vector<int32_t>& out) const;

  TokenizerSpec spec_;
  int64_t n_base_ = 0;
  std::unordered_map<std::string, int32_t> ranks_;   // token bytes -> id, specials excluded
  std::unordered_map<uint64_t, PairMerge> merge_table_;  // (left << 32 | right) -> merge; HF rule only
  std::array<int32_t, 256> byte_rank_{};             // byte value -> id of that one-byte token
  Pretokenizer pretokenizer_;
};

// The file Tokenizer::load(path) reads: `path` itself, or a directory's tokenizer.json (preferred)
// or tokenizer.model; a TokenizerError when a directory holds neither.
std::filesystem::path tokenizer_file(const std::string& path);

}  // namespace ctitan::data
