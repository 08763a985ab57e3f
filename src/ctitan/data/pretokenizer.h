#pragma once
// Pretokenizer: splits text into the pieces that BPE merges never cross, using Llama 3's
// regular expression (the one tiktoken uses for its cl100k/Llama 3 encodings) through PCRE2.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;  // pcre2_code from <pcre2.h>, kept out of this header.

namespace ctitan::data {

// Llama 3's split pattern: contractions, letter runs with one optional leading non-letter, digit
// runs of at most 3, punctuation runs, newline runs, and other whitespace.
extern const char* const kLlama3SplitPattern;

class Pretokenizer {
 public:
  // Throws ctitan::InputError if `pattern` does not compile.
  explicit Pretokenizer(const std::string& pattern = kLlama3SplitPattern);

  // Pieces are views into `text` and, concatenated, give back exactly `text`, even when `text`
  // is not valid UTF-8. Thread-safe: each call has its own match state.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  // Shared so Pretokenizer (and Tokenizer) can be copied: compiled code is read-only during
  // matching, and PCRE2 allows concurrent matches against one code object.
  std::shared_ptr<pcre2_real_code_8> code_;
};

}  // namespace ctitan::data
