#pragma once
// Hugging Face's tokenizer files for byte-level BPE (the kind Llama 3 and GPT-2 ship):
// tokenizer.json read into a Tokenizer, and written from one together with
// tokenizer_config.json and generation_config.json, so `transformers` loads an export as is.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ctitan/data/tokenizer.h"

namespace ctitan::data {

// The largest tokenizer file read (a tiktoken rank file or a tokenizer.json): real ones are a few
// MB (Llama 3's ranks 2.2 MB); anything near this is not a tokenizer (common/input_file.h).
constexpr int64_t kMaxTokenizerFileBytes = int64_t(256) << 20;

// Reads `file` (a tokenizer.json). BOS and EOS are the bos_token / eos_token of a
// tokenizer_config.json beside it, else the added tokens named as Llama 3, Llama 2 or GPT-2 name
// them. Anything beyond byte-level BPE (a normalizer, another pre-tokenizer or model type,
// dropout, a word prefix/suffix) is refused with one line naming the key: it would silently
// encode differently.
Tokenizer load_hf_tokenizer_json(const std::filesystem::path& file);

// tokenizer.json for `tokenizer`. A tokenizer read from a rank file gets the merges Hugging
// Face's tiktoken converter derives (every split of a token into two tokens, ordered by the
// merged token's rank) and `ignore_merges`. They encode as tiktoken does except where one piece
// holds two overlapping splits of the same token (say [ab][a][ba] with "aba" a token), which
// the two rules may merge in another order; the converter shares this. Tested equal on a
// multi-script corpus (tests/data/hf_tokenizer_test.cpp).
nlohmann::json hf_tokenizer_json(const Tokenizer& tokenizer);

// Writes tokenizer.json, tokenizer_config.json and generation_config.json into `dir`.
void write_hf_tokenizer_files(const Tokenizer& tokenizer, const std::filesystem::path& dir);

}  // namespace ctitan::data
