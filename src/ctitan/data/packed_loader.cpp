#include "ctitan/data/packed_loader.h"

#include <fmt/format.h>

#include <algorithm>

#include "ctitan/common/error.h"

namespace ctitan::data {

PackedLoader::PackedLoader(std::unique_ptr<TokenStream> stream, int64_t seq_len, int64_t batch_size,
                           std::string name, int64_t dp_rank, int64_t dp_degree, int64_t vocab_size)
    : stream_(std::move(stream)), seq_len_(seq_len), batch_size_(batch_size), name_(std::move(name)),
      dp_rank_(dp_rank), dp_degree_(dp_degree), vocab_size_(vocab_size) {}

std::vector<int32_t> PackedLoader::next_window() {
  const size_t need = size_t(seq_len_ + 1);
  while (buffer_.size() - buffer_start_ < need) {
    auto chunk = stream_->next();
    if (!chunk) {
      // An epoch ended. If it never filled one window, the data is too short: looping would hang.
      if (tokens_this_epoch_ < int64_t(need)) {
        throw InputError(fmt::format("dataset error: {} has {} tokens, fewer than seq_len + 1 = {}",
                                     name_, tokens_this_epoch_, need));
      }
      ++epoch_;
      tokens_this_epoch_ = 0;
      stream_->seek(0);
      continue;
    }
    tokens_this_epoch_ += int64_t(chunk->size());
    buffer_.insert(buffer_.end(), chunk->begin(), chunk->end());
  }
  std::vector<int32_t> window(buffer_.begin() + long(buffer_start_), buffer_.begin() + long(buffer_start_ + need));
  buffer_start_ += need;
  // Compact now and then so the buffer never grows beyond one chunk plus one window.
  if (buffer_start_ > (1u << 20)) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + long(buffer_start_));
    buffer_start_ = 0;
  }
  return window;
}

Batch PackedLoader::next() {
  // (B, T + 1) windows, then split into inputs [:, :-1] and labels [:, 1:].
  auto windows = torch::empty({batch_size_, seq_len_ + 1}, torch::kLong);
  auto* out = windows.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_size_;) {
    auto window = next_window();
    if (window_index_++ % dp_degree_ != dp_rank_) continue;
    if (vocab_size_ > 0) {
      auto [lo, hi] = std::minmax_element(window.begin(), window.end());
      if (*lo < 0 || *hi >= vocab_size_) {
        throw InputError(fmt::format("dataset error: {} holds token id {} outside the model's vocabulary [0, {})",
                                     name_, *lo < 0 ? *lo : *hi, vocab_size_));
      }
    }
    std::copy(window.begin(), window.end(), out + b * (seq_len_ + 1));
    ++b;
  }
  return {windows.slice(1, 0, seq_len_).contiguous(), windows.slice(1, 1, seq_len_ + 1).contiguous()};
}

StateDict PackedLoader::state_dict() const {
  std::vector<int32_t> pending(buffer_.begin() + long(buffer_start_), buffer_.end());
  StateDict state = stream_->state_dict();  // "stream_position", and a mixture's sources
  state["epoch"] = scalar_state(epoch_);
  state["window_index"] = scalar_state(window_index_);
  state["tokens_this_epoch"] = scalar_state(tokens_this_epoch_);
  state["buffer"] = torch::tensor(at::ArrayRef<int32_t>(pending), torch::kInt).clone();
  return state;
}

void PackedLoader::load_state_dict(const StateDict& state) {
  stream_->load_state_dict(state);
  epoch_ = require_state(state, "epoch").item<int64_t>();
  window_index_ = require_state(state, "window_index").item<int64_t>();
  tokens_this_epoch_ = require_state(state, "tokens_this_epoch").item<int64_t>();
  auto buffer = require_state(state, "buffer").to(torch::kInt).contiguous();
  buffer_.assign(buffer.data_ptr<int32_t>(), buffer.data_ptr<int32_t>() + buffer.numel());
  buffer_start_ = 0;
}

}  // namespace ctitan::data
