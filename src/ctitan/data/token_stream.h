#pragma once
// A dataset seen as a resumable stream of token chunks. Document formats yield one tokenized
// document per chunk (BOS ... EOS); token files yield fixed-size slices; a mixture
// (data/mixture_stream.h) yields its sources' chunks in a seeded weighted order. A single
// dataset's whole state is one integer position, which makes the loader's state small and exact.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/data/dataset_format.h"
#include "ctitan/data/documents.h"
#include "ctitan/data/tokenizer.h"

namespace ctitan::data {

class TokenStream {
 public:
  virtual ~TokenStream() = default;
  // The next chunk, or nullopt at the end of the data (the caller starts a new epoch with seek(0)).
  virtual std::optional<std::vector<int32_t>> next() = 0;
  virtual int64_t position() const = 0;
  virtual void seek(int64_t position) = 0;

  // What a checkpoint keeps of the stream: "stream_position", and more for a stream whose
  // state is more than a position (a mixture's sources).
  virtual StateDict state_dict() const;
  virtual void load_state_dict(const StateDict& state);

  // Tokens drawn so far from each named source (a mixture's); empty for a single dataset.
  virtual std::vector<std::pair<std::string, int64_t>> source_tokens() const { return {}; }
};

// A document as the loader trains on it, BOS ... EOS; nullopt for a blank document, which is
// skipped (it would teach only BOS -> EOS).
std::optional<std::vector<int32_t>> encode_document(const Tokenizer& tokenizer, const std::string& text);

// Opens the dataset at `path` in `format` (auto or a registry name; data/documents.h lists the
// files). Documents need `tokenizer`. `key` names the dataset in error messages.
std::unique_ptr<TokenStream> open_token_stream(const std::string& path, const std::string& format,
                                               std::shared_ptr<const Tokenizer> tokenizer, const std::string& key,
                                               const DocumentOptions& options = {});
// The same over files already listed (list_dataset_files; non-empty, all tokens or all documents).
std::unique_ptr<TokenStream> open_token_stream(std::vector<DatasetFile> files, std::shared_ptr<const Tokenizer> tokenizer,
                                               const std::string& key, const DocumentOptions& options = {});

}  // namespace ctitan::data
