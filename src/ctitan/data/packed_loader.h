#pragma once
// The stateful dataloader: packs the token stream into windows of seq_len + 1 tokens and deals
// them out as (inputs, labels) batches. Windows are numbered globally and window i belongs to
// data-parallel rank i % dp_degree, so the global sample order does not depend on the layout.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/data/token_stream.h"

namespace ctitan::data {

struct Batch {
  torch::Tensor inputs;  // (B, T) int64
  torch::Tensor labels;  // (B, T) int64, inputs shifted left by one
};

class PackedLoader {
 public:
  // `name` (e.g. "training.dataset_path 'x'") appears in error messages. With vocab_size > 0,
  // a token id outside [0, vocab_size) is an error naming the dataset, not an index crash.
  PackedLoader(std::unique_ptr<TokenStream> stream, int64_t seq_len, int64_t batch_size,
               std::string name, int64_t dp_rank = 0, int64_t dp_degree = 1, int64_t vocab_size = 0);

  Batch next();
  int64_t epoch() const { return epoch_; }
  // Tokens drawn from each source of a mixture so far (TokenStream::source_tokens).
  std::vector<std::pair<std::string, int64_t>> source_tokens() const { return stream_->source_tokens(); }

  // Resumes at exactly the next token: the stream position, the epoch, the tokens already read
  // but not yet packed, and the global window counter.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  std::vector<int32_t> next_window();  // seq_len + 1 tokens

  std::unique_ptr<TokenStream> stream_;
  int64_t seq_len_, batch_size_;
  std::string name_;
  int64_t dp_rank_, dp_degree_, vocab_size_;
  std::vector<int32_t> buffer_;
  size_t buffer_start_ = 0;
  int64_t epoch_ = 0;
  int64_t window_index_ = 0;
  int64_t tokens_this_epoch_ = 0;
};

}  // namespace ctitan::data
