#include "ctitan/data/mixture_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ctitan/common/error.h"
#include "ctitan/common/fnv_hash.h"

namespace ctitan::data {
namespace {

// SplitMix64's finaliser: a counter-based generator, so draw i needs no state but (seed, i).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A double in [0, 1) from 53 random bits.
double uniform(uint64_t seed, int64_t i) { return double(mix(mix(seed) ^ uint64_t(i)) >> 11) * 0x1.0p-53; }

std::string key(size_t i, const char* field) { return fmt::format("mixture.{}.{}", i, field); }

int64_t identity_hash(const std::string& identity) { return int64_t(Fnv1a64().add_field(identity).value()); }

}  // namespace

MixtureStream::MixtureStream(std::vector<MixtureSource> sources, uint64_t seed) : seed_(seed) {
  if (sources.empty()) throw std::logic_error("MixtureStream: no sources");
  double total = 0;
  for (auto& s : sources) {
    if (!(s.weight > 0) || !std::isfinite(s.weight)) throw std::logic_error("MixtureStream: a weight is not > 0");
    total += s.weight;
    sources_.push_back({std::move(s)});
  }
  double sum = 0;
  for (const auto& s : sources_) cumulative_.push_back((sum += s.spec.weight) / total);
  cumulative_.back() = 1.0;  // rounding must not leave a gap below 1
}

size_t MixtureStream::source_of_draw(int64_t i) const {
  const double u = uniform(seed_, i);
  return size_t(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
}

std::optional<std::vector<int32_t>> MixtureStream::next() {
  Source& source = sources_[source_of_draw(draws_)];
  auto chunk = source.spec.stream->next();
  if (!chunk) {
    ++source.epoch;
    source.spec.stream->seek(0);
    chunk = source.spec.stream->next();
    // A whole epoch without one chunk: the source would be drawn again and again, forever.
    if (!chunk) throw InputError(fmt::format("dataset error: {} runs dry: it holds no non-blank document", source.spec.label));
  }
  ++draws_;
  source.tokens += int64_t(chunk->size());
  return chunk;
}

void MixtureStream::seek(int64_t position) {
  if (position != 0) throw std::logic_error("MixtureStream: seek to a position other than 0 (use load_state_dict)");
  draws_ = 0;
  for (auto& s : sources_) {
    s.spec.stream->seek(0);
    s.epoch = 0;
    s.tokens = 0;
  }
}

StateDict MixtureStream::state_dict() const {
  StateDict state = {{"stream_position", scalar_state(draws_)},
                     {"mixture.sources", scalar_state(int64_t(sources_.size()))}};
  for (size_t i = 0; i < sources_.size(); ++i) {
    state[key(i, "position")] = scalar_state(sources_[i].spec.stream->position());
    state[key(i, "epoch")] = scalar_state(sources_[i].epoch);
    state[key(i, "tokens")] = scalar_state(sources_[i].tokens);
    state[key(i, "identity")] = scalar_state(identity_hash(sources_[i].spec.identity));
  }
  return state;
}

void MixtureStream::load_state_dict(const StateDict& state) {
  auto it = state.find("mixture.sources");
  const int64_t saved = it == state.end() ? 0 : it->second.item<int64_t>();
  if (saved == 0) {
    throw InputError(fmt::format("checkpoint error: the data loader's state is of one dataset (training.dataset_path); "
                                 "this run reads a mixture of {} ([[training.datasets]])", sources_.size()));
  }
  if (saved != int64_t(sources_.size())) {
    throw InputError(fmt::format("checkpoint error: the data loader's state holds a mixture of {} datasets; "
                                 "training.datasets lists {}", saved, sources_.size()));
  }
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (require_state(state, key(i, "identity")).item<int64_t>() != identity_hash(sources_[i].spec.identity)) {
      throw InputError(fmt::format("checkpoint error: {} is not the dataset the checkpoint's mixture read as its "
                                   "source {} (a mixture resumes with the same path, format and text_column in the "
                                   "same order; weights may change)", sources_[i].spec.label, i));
    }
  }
  draws_ = require_state(state, "stream_position").item<int64_t>();
  for (size_t i = 0; i < sources_.size(); ++i) {
    sources_[i].spec.stream->seek(require_state(state, key(i, "position")).item<int64_t>());
    sources_[i].epoch = require_state(state, key(i, "epoch")).item<int64_t>();
    sources_[i].tokens = require_state(state, key(i, "tokens")).item<int64_t>();
  }
}

std::vector<std::pair<std::string, int64_t>> MixtureStream::source_tokens() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& s : sources_) out.emplace_back(s.spec.name, s.tokens);
  return out;
}

}  // namespace ctitan::data
