#pragma once
// `data prepare`'s engine: documents are read on the calling thread, tokenized on worker
// threads in batches, and handed to the sink in input order, so the output does not depend on
// the number of workers.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <utility>
#include <vector>

#include "ctitan/data/documents.h"
#include "ctitan/data/tokenizer.h"

namespace ctitan::data {

struct TokenizeCounts {
  int64_t documents = 0;  // read, blank ones included (the loader's position counts them too)
  int64_t tokens = 0;
};

// `workers` = 1 tokenizes on the calling thread alone; more start that many threads beside the
// reader. `sink` sees each non-blank document's ids (BOS ... EOS, see encode_document) in order,
// on the calling thread. `on_progress` is called after each batch with the counts so far.
TokenizeCounts tokenize_in_order(const std::vector<DatasetFile>& files, const DocumentOptions& options,
                                 const Tokenizer& tokenizer, int workers,
                                 const std::function<void(const std::vector<int32_t>&)>& sink,
                                 const std::function<void(const TokenizeCounts&)>& on_progress = {});

}  // namespace ctitan::data
