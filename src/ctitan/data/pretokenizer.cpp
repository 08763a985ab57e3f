#include "ctitan/data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>

#include "ctitan/common/error.h"

namespace ctitan::data {

// Checked against Python's `regex` module on random text over the code points assigned in Unicode
// 14 (PCRE2 10.42's tables): the splits agree except around U+180E MONGOLIAN VOWEL SEPARATOR,
// which PCRE2 still counts as \s.
const char* const kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "unknown PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* context) const { pcre2_match_context_free(context); }
};

// PCRE2 stops a match after 10M steps by default. One match of the Llama 3 pattern over a run of
// n spaces backtracks about n times (`\s*[\r\n]+` gives up, then `\s+(?!\S)` wins), so long
// whitespace runs, which real data has (padded tables, ASCII art), need more.
// Scaling with the text keeps linear patterns working while still stopping runaway backtracking.
constexpr uint64_t kMinMatchLimit = 10'000'000;
constexpr uint64_t kMatchStepsPerByte = 32;

}  // namespace

Pretokenizer::Pretokenizer(const std::string& pattern) {
  // PCRE2_MATCH_INVALID_UTF rather than pre-validating or falling back to raw bytes: valid
  // stretches of a partly broken text still split exactly as tiktoken would split them, and the
  // invalid bytes (which no match may contain) become pieces of their own in split(). Training
  // data scraped from the web does contain such bytes; refusing it or crashing is worse.
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    throw InputError("tokenizer error: split pattern does not compile at offset " +
                     std::to_string(error_offset) + ": " + pcre2_message(error_code));
  }
  code_.reset(code, pcre2_code_free);
  {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(pcre2_match_data_create_from_pattern(code, nullptr));
    if (!match) throw std::bad_alloc();
    if (pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(""), 0, 0, 0, match.get(), nullptr) >= 0) {
      throw InputError("tokenizer error: split pattern matches the empty string: " + pattern.substr(0, 60));
    }
  }
  // JIT is only a speed-up (several times faster here); when it is unavailable pcre2_match
  // interprets the same pattern with the same results.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
}

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr));
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> context(
      pcre2_match_context_create(nullptr));
  if (!match || !context) throw std::bad_alloc();
  uint64_t limit = std::max<uint64_t>(kMinMatchLimit, kMatchStepsPerByte * text.size());
  pcre2_set_match_limit(context.get(),
                        static_cast<uint32_t>(std::min<uint64_t>(limit, UINT32_MAX)));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());

  std::vector<std::string_view> pieces;
  pieces.reserve(text.size() / 4);
  size_t pos = 0;
  while (pos < text.size()) {
    // PCRE2_NOTEMPTY: never an empty match, which would not advance. Patterns that match the
    // empty string are refused by the constructor (Oniguruma, under Hugging Face, would return
    // such matches and split differently); this only guards patterns that do so in context.
    int rc = pcre2_match(code_.get(), subject, text.size(), pos, PCRE2_NOTEMPTY, match.get(), context.get());
    size_t start = text.size();
    size_t end = text.size();
    if (rc >= 0) {
      start = ovector[0];
      end = ovector[1];
    } else if (rc != PCRE2_ERROR_NOMATCH) {
      throw InputError("tokenizer error: splitting text failed at byte " + std::to_string(pos) +
                       ": " + pcre2_message(rc));
    }
    // Bytes skipped by the search are invalid UTF-8: every valid character matches some branch.
    if (start > pos) pieces.push_back(text.substr(pos, start - pos));
    // PCRE2_NOTEMPTY makes end > start, so the loop always advances.
    if (end > start) pieces.push_back(text.substr(start, end - start));
    pos = end;
  }
  return pieces;
}

}  // namespace ctitan::data
