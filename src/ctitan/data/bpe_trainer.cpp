#include "ctitan/data/bpe_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "ctitan/common/error.h"
#include "ctitan/common/progress_bar.h"
#include "ctitan/data/pretokenizer.h"

namespace ctitan::data {
namespace {

constexpr int64_t kMinVocabSize = 256 + 1 + 2;  // bytes, one merge, BOS and EOS

// A distinct pretokenized piece: its current tokens and how often it occurs in the texts.
struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

// Adjacent token pair (left, right) packed into one hashable integer.
using PairKey = uint64_t;
PairKey pair_key(int32_t left, int32_t right) {
  return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
}
int32_t left_of(PairKey key) { return static_cast<int32_t>(key >> 32); }
int32_t right_of(PairKey key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

struct Candidate {
  int64_t count;  // pair count when pushed; at least the current count (see train_bpe)
  PairKey pair;
};

}  // namespace

Tokenizer train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& options) {
  if (options.vocab_size < kMinVocabSize) {
    throw InputError(
        "tokenizer error: vocab_size must be at least " + std::to_string(kMinVocabSize) +
        " (256 byte tokens, one merge, BOS and EOS), got " + std::to_string(options.vocab_size));
  }

  // Count distinct pieces: merges never cross piece boundaries, so each distinct piece is merged
  // once and weighted by its count, instead of once per occurrence.
  Pretokenizer pretokenizer;
  std::unordered_map<std::string_view, int64_t> piece_counts;
  for (const std::string& text : texts) {
    for (std::string_view piece : pretokenizer.split(text)) ++piece_counts[piece];
  }
  if (piece_counts.empty()) throw InputError("tokenizer error: no training text");

  std::vector<Word> words;
  for (const auto& [piece, count] : piece_counts) {
    if (piece.size() < 2) continue;  // nothing to merge
    Word word;
    word.count = count;
    for (char c : piece) word.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(word));
  }

  std::vector<std::string> tokens;  // rank -> bytes
  std::unordered_map<std::string, int32_t> token_ids;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    token_ids.emplace(tokens.back(), b);
  }

  // Exact occurrence counts (weighted by word count) and, per pair, the words that contain or
  // once contained it. Word lists are never pruned: a merge rescans each listed word anyway.
  std::unordered_map<PairKey, int64_t> pair_counts;
  std::unordered_map<PairKey, std::vector<int32_t>> pair_words;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].symbols;
    for (size_t k = 0; k + 1 < s.size(); ++k) {
      PairKey key = pair_key(s[k], s[k + 1]);
      pair_counts[key] += words[w].count;
      pair_words[key].push_back(static_cast<int32_t>(w));
    }
  }

  // Max-heap of candidates with lazy invalidation. A merge of (a, b) into c only lowers the counts
  // of pairs without c, and pairs with c are pushed afresh after each merge, so every pair has an
  // entry whose count is at least its current count. Hence a popped entry whose count is still
  // current is the true best pair; otherwise it is re-pushed with its current count.
  auto worse = [&tokens](const Candidate& x, const Candidate& y) {
    if (x.count != y.count) return x.count < y.count;
    const std::string& xl = tokens[left_of(x.pair)];
    const std::string& yl = tokens[left_of(y.pair)];
    if (xl != yl) return xl > yl;
    return tokens[right_of(x.pair)] > tokens[right_of(y.pair)];
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> heap(worse);
  for (const auto& [key, count] : pair_counts) heap.push({count, key});

  const auto target_ranks = static_cast<size_t>(options.vocab_size - 2);
  const int64_t total_merges = options.vocab_size - 2 - 256;
  ProgressBar progress("merges", total_merges, options.show_progress && isatty(STDERR_FILENO));
  std::vector<int32_t> last_visit(words.size(), -1);  // merge step that last rewrote each word
  std::vector<PairKey> new_pairs;
  int32_t step = 0;

  while (tokens.size() < target_ranks && !heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    auto count_it = pair_counts.find(top.pair);
    int64_t current = count_it == pair_counts.end() ? 0 : count_it->second;
    if (current <= 0) continue;
    if (current != top.count) {
      heap.push({current, top.pair});
      continue;
    }

    const int32_t a = left_of(top.pair);
    const int32_t b = right_of(top.pair);
    // Should a merge rebuild bytes that are already a token by another path ("ab"+"c" after
    // "a"+"bc"; not seen in random trials, but not ruled out either), it reuses that token: the
    // rank file maps each byte string to one rank.
    std::string merged = tokens[a] + tokens[b];
    int32_t c;
    if (auto it = token_ids.find(merged); it != token_ids.end()) {
      c = it->second;
    } else {
      c = static_cast<int32_t>(tokens.size());
      token_ids.emplace(merged, c);
      tokens.push_back(std::move(merged));
    }

    std::vector<int32_t> affected = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    new_pairs.clear();
    for (int32_t w : affected) {
      if (last_visit[w] == step) continue;  // listed twice
      last_visit[w] = step;
      Word& word = words[w];
      auto& s = word.symbols;
      bool found = false;
      for (size_t k = 0; k + 1 < s.size() && !found; ++k) found = s[k] == a && s[k + 1] == b;
      if (!found) continue;  // stale listing: an earlier merge consumed the pair here

      // Words are short, so subtracting all of the word's pairs and adding back the rewritten
      // word's pairs is simpler than tracking the neighbours of each occurrence, and costs little.
      for (size_t k = 0; k + 1 < s.size(); ++k) pair_counts[pair_key(s[k], s[k + 1])] -= word.count;
      size_t out = 0;
      for (size_t k = 0; k < s.size();) {
        if (k + 1 < s.size() && s[k] == a && s[k + 1] == b) {
          s[out++] = c;
          k += 2;
        } else {
          s[out++] = s[k++];
        }
      }
      s.resize(out);
      for (size_t k = 0; k + 1 < s.size(); ++k) {
        PairKey key = pair_key(s[k], s[k + 1]);
        pair_counts[key] += word.count;
        // Only pairs with c can be new to this word; the others were already listed.
        if (s[k] == c || s[k + 1] == c) {
          pair_words[key].push_back(w);
          new_pairs.push_back(key);
        }
      }
    }
    pair_counts.erase(top.pair);
    std::sort(new_pairs.begin(), new_pairs.end());
    new_pairs.erase(std::unique(new_pairs.begin(), new_pairs.end()), new_pairs.end());
    for (PairKey key : new_pairs) heap.push({pair_counts[key], key});

    ++step;
    progress.update(static_cast<int64_t>(tokens.size()) - 256);
  }
  progress.update(static_cast<int64_t>(tokens.size()) - 256);
  progress.finish();
  return Tokenizer::from_ranks(std::move(tokens));
}

}  // namespace ctitan::data
