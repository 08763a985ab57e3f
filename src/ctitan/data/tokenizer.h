#pragma once
// Tokenizer: byte-level BPE with tiktoken's encoding algorithm and rank-file format (the format
// of Llama 3's tokenizer.model), plus the two special tokens BOS and EOS.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ctitan/data/pretokenizer.h"

namespace ctitan::data {

class Tokenizer {
 public:
  // Reads a tiktoken rank file: one "<base64 token bytes> <rank>" per line, in any order, with
  // every rank 0..n-1 exactly once and every single byte among the tokens. Blank lines are
  // skipped, as tiktoken does. Throws ctitan::InputError naming the file and line at fault.
  static Tokenizer load(const std::string& path);
  // token_bytes_by_rank[r] holds the bytes of rank r. Same checks as load().
  static Tokenizer from_ranks(std::vector<std::string> token_bytes_by_rank);
  // Writes the rank-file format, one line per rank in rank order. The file appears complete or
  // not at all: it is written beside `path` and renamed over it.
  void save(const std::string& path) const;

  // Text is encoded as plain bytes: "<|begin_of_text|>" inside `text` is not the BOS token.
  std::vector<int32_t> encode(std::string_view text, bool bos, bool eos) const;
  // Throws ctitan::InputError on an id outside [0, vocab_size()). The result may end in the
  // middle of a UTF-8 character if `ids` does.
  std::string decode(const std::vector<int32_t>& ids) const;

  // Specials follow the base ranks, as in Llama 3 (BOS 128000, EOS 128001).
  int32_t bos_id() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t eos_id() const { return static_cast<int32_t>(tokens_.size()) + 1; }
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()) + 2; }
  int64_t n_base() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  // `source` and `line_of_rank` (empty, or one line number per rank) only make error messages.
  Tokenizer(std::vector<std::string> tokens, const std::string& source,
            const std::vector<size_t>& line_of_rank);

  std::vector<std::string> tokens_;                 // rank -> token bytes
  std::unordered_map<std::string, int32_t> ranks_;  // token bytes -> rank
  std::array<int32_t, 256> byte_rank_{};            // byte value -> rank of that one-byte token
  Pretokenizer pretokenizer_;
};

}  // namespace ctitan::data
