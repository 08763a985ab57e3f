#pragma once
// A weighted mixture of datasets ([[training.datasets]]): each chunk (one document) comes from a
// source drawn with probability weight / sum of weights. Draw i is a pure function of (seed, i),
// so the stream is the same for any data-parallel degree (the loader deals out windows of this
// one stream) and its state is exact: the number of draws, and each source's position, epoch and
// token count. A source that ends starts again (its own epoch); the mixture never ends, so the
// weights, not the sources' sizes, set the proportions, as with Hugging Face's
// interleave_datasets(..., stopping_strategy="all_exhausted") over infinite sources.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/data/token_stream.h"

namespace ctitan::data {

struct MixtureSource {
  std::string name;   // in metrics: data_tokens/<name>
  std::string label;  // in errors: "training.datasets[1] 'path'"
  // What the source reads (path, format, text column): a checkpoint's positions resume only the
  // sources they were saved for, in the same order. Weights may change between runs.
  std::string identity;
  std::unique_ptr<TokenStream> stream;
  double weight = 1;
};

class MixtureStream : public TokenStream {
 public:
  // Weights must be finite and > 0 (the config checks them, naming the key).
  MixtureStream(std::vector<MixtureSource> sources, uint64_t seed);

  std::optional<std::vector<int32_t>> next() override;
  int64_t position() const override { return draws_; }
  // seek(0) starts over; any other position needs the sources' states: load_state_dict.
  void seek(int64_t position) override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;
  std::vector<std::pair<std::string, int64_t>> source_tokens() const override;

  // Which source draw `i` takes: exposed so tests can check proportions without tokenizing.
  size_t source_of_draw(int64_t i) const;

 private:
  struct Source {
    MixtureSource spec;
    int64_t epoch = 0;   // times this source ran out and started again
    int64_t tokens = 0;  // drawn from it, over all epochs
  };
  std::vector<Source> sources_;
  std::vector<double> cumulative_;  // cumulative_[i] = (w_0 + ... + w_i) / sum of weights
  uint64_t seed_;
  int64_t draws_ = 0;
};

}  // namespace ctitan::data
