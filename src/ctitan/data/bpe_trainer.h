#pragma once
// train_bpe, BpeTrainOptions: learn a byte-level BPE vocabulary from text.
#include <cstdint>
#include <string>
#include <vector>

#include "ctitan/data/tokenizer.h"

namespace ctitan::data {

struct BpeTrainOptions {
  // Total ids including BOS and EOS: the result has vocab_size - 2 base ranks, the 256 bytes
  // (rank = byte value) then one per merge. At least 259, so that one merge is learned. Training
  // stops early, with a smaller vocabulary, when no adjacent pair is left to merge.
  int64_t vocab_size = 2048;
  // Draw a progress bar on stderr.
  bool show_progress = false;  // a progress bar on stderr, when stderr is a terminal
};

// Splits the texts with the Llama 3 pretokenizer and repeatedly merges the most frequent adjacent
// pair of tokens within a piece. Ties go to the pair whose (left bytes, right bytes) sorts first,
// so the result depends only on the texts and options. Throws ctitan::InputError on a too-small
// vocab_size or when there is no text.
Tokenizer train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& options);

}  // namespace ctitan::data
