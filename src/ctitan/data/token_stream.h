#pragma once
// A dataset seen as a resumable stream of token chunks. Text and JSONL sources yield one
// tokenized document per chunk (BOS ... EOS); token files yield fixed-size slices. The stream's
// whole state is one integer position, which makes the loader's state small and exact.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctitan/data/tokenizer.h"

namespace ctitan::data {

class TokenStream {
 public:
  virtual ~TokenStream() = default;
  // The next chunk, or nullopt at the end of the data (the caller starts a new epoch with seek(0)).
  virtual std::optional<std::vector<int32_t>> next() = 0;
  virtual int64_t position() const = 0;
  virtual void seek(int64_t position) = 0;
};

// A document as the loader trains on it, BOS ... EOS; nullopt for a blank document, which is
// skipped (it would teach only BOS -> EOS).
std::optional<std::vector<int32_t>> encode_document(const Tokenizer& tokenizer, const std::string& text);

// Opens the dataset at `path` (see list_dataset_files for formats). Text needs `tokenizer`.
std::unique_ptr<TokenStream> open_token_stream(const std::string& path, const std::string& format,
                                               std::shared_ptr<const Tokenizer> tokenizer,
                                               const std::string& key);

}  // namespace ctitan::data
