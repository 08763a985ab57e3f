#include "ctitan/data/tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include "ctitan/common/error.h"
#include "ctitan/common/path_text.h"
#include "ctitan/data/base64.h"

namespace ctitan::data {
namespace {

constexpr int32_t kNoRank = -1;
const char* const kBosText = "<|begin_of_text|>";
const char* const kEosText = "<|end_of_text|>";

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw InputError("tokenizer error: " + where + ": " + what);
}

// Keeps error messages on one line however long or binary the offending text is.
std::string single_quoted(std::string_view text) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  for (char c : text.substr(0, kMax)) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
      out += hex;
    }
  }
  if (text.size() > kMax) out += "...";
  return out + "'";
}

// Reused across the pieces of one encode() call so merging allocates only for long pieces.
// Nodes are the current tokens of the piece, named by their first byte offset; merging node i
// with its successor keeps i and retires the successor.
struct MergeScratch {
  std::vector<uint32_t> next;  // (n) end offset of node i = start of its successor; 0 = retired
  std::vector<uint32_t> prev;  // (n) start of the node before i
  std::vector<int32_t> token_rank;  // (n) rank of node i's bytes
  std::vector<int32_t> pair_rank;   // (n) rank of node i joined with its successor, or kNoRank
  std::vector<std::pair<int32_t, uint32_t>> heap;  // (pair rank, node), min first
  std::string key;
};

// tiktoken's byte-pair merge: repeatedly join the adjacent pair whose concatenation has the lowest
// rank, the leftmost on ties. tiktoken rescans all pairs per merge (quadratic in the piece); a heap
// with stale entries picks the same pair each step and keeps long pieces (CJK runs, base64 blobs)
// at n log n. An entry is stale when its node was retired or its pair grew: a pair only grows, and
// distinct byte strings have distinct ranks, so a stale entry never matches pair_rank again.
void merge_piece(std::string_view piece, const std::unordered_map<std::string, int32_t>& ranks,
                 const std::array<int32_t, 256>& byte_rank, MergeScratch& s,
                 std::vector<int32_t>& out) {
  const auto n = static_cast<uint32_t>(piece.size());
  auto rank_of = [&](uint32_t begin, uint32_t end) {
    s.key.assign(piece.data() + begin, end - begin);
    auto it = ranks.find(s.key);
    return it == ranks.end() ? kNoRank : it->second;
  };
  std::greater<std::pair<int32_t, uint32_t>> later;
  auto push = [&](int32_t rank, uint32_t node) {
    s.heap.emplace_back(rank, node);
    std::push_heap(s.heap.begin(), s.heap.end(), later);
  };

  s.next.resize(n);
  s.prev.resize(n);
  s.token_rank.resize(n);
  s.pair_rank.resize(n);
  s.heap.clear();
  for (uint32_t i = 0; i < n; ++i) {
    s.next[i] = i + 1;
    s.prev[i] = i - 1;  // unused for i == 0
    s.token_rank[i] = byte_rank[static_cast<uint8_t>(piece[i])];
    s.pair_rank[i] = i + 1 < n ? rank_of(i, i + 2) : kNoRank;
    if (s.pair_rank[i] != kNoRank) s.heap.emplace_back(s.pair_rank[i], i);
  }
  std::make_heap(s.heap.begin(), s.heap.end(), later);

  while (!s.heap.empty()) {
    auto [rank, i] = s.heap.front();
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    s.heap.pop_back();
    if (s.next[i] == 0 || s.pair_rank[i] != rank) continue;

    uint32_t j = s.next[i];  // successor, absorbed into i
    uint32_t k = s.next[j];  // node after the merged token, or n
    s.next[i] = k;
    s.next[j] = 0;
    s.token_rank[i] = rank;
    if (k < n) s.prev[k] = i;
    s.pair_rank[i] = k < n ? rank_of(i, s.next[k]) : kNoRank;
    if (s.pair_rank[i] != kNoRank) push(s.pair_rank[i], i);
    if (i > 0) {
      uint32_t p = s.prev[i];
      s.pair_rank[p] = rank_of(p, k);
      if (s.pair_rank[p] != kNoRank) push(s.pair_rank[p], p);
    }
  }
  for (uint32_t i = 0; i < n; i = s.next[i]) out.push_back(s.token_rank[i]);
}

// Parses a rank: decimal digits only, as tiktoken writes them.
bool parse_rank(std::string_view text, int64_t& rank) {
  if (text.empty() || text.size() > 12) return false;
  rank = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    rank = rank * 10 + (c - '0');
  }
  return true;
}

}  // namespace

Tokenizer::Tokenizer(std::vector<std::string> tokens, const std::string& source,
                     const std::vector<size_t>& line_of_rank)
    : tokens_(std::move(tokens)) {
  auto where = [&](size_t rank) {
    return line_of_rank.empty() ? source + ": rank " + std::to_string(rank)
                                : source + ":" + std::to_string(line_of_rank[rank]);
  };
  if (tokens_.empty()) fail(source, "no tokens");
  // Two ids are reserved for BOS and EOS above the base ranks.
  if (tokens_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()) - 2) {
    fail(source, std::to_string(tokens_.size()) + " tokens do not fit in int32 ids");
  }
  ranks_.reserve(tokens_.size());
  for (size_t rank = 0; rank < tokens_.size(); ++rank) {
    if (tokens_[rank].empty()) fail(where(rank), "empty token");
    auto [it, inserted] = ranks_.emplace(tokens_[rank], static_cast<int32_t>(rank));
    if (!inserted) {
      fail(where(rank), "token " + single_quoted(base64_encode(tokens_[rank])) + " already has rank " +
                            std::to_string(it->second));
    }
  }
  // Every piece must be able to fall back to single bytes, or some text could not be encoded.
  for (int b = 0; b < 256; ++b) {
    auto it = ranks_.find(std::string(1, static_cast<char>(b)));
    if (it == ranks_.end()) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", b);
      fail(source, std::string("no token for byte ") + hex + " (all 256 single bytes are needed)");
    }
    byte_rank_[b] = it->second;
  }
}

Tokenizer Tokenizer::from_ranks(std::vector<std::string> token_bytes_by_rank) {
  return Tokenizer(std::move(token_bytes_by_rank), "token list", {});
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(path + relative_path_note(path), std::string("cannot open: ") + std::strerror(errno));
  std::stringstream buffer;
  buffer << file.rdbuf();
  if (file.bad()) fail(path, std::string("cannot read: ") + std::strerror(errno));
  const std::string contents = buffer.str();

  struct Entry {
    size_t line;
    std::string_view token;  // base64
    std::string_view rank;
  };
  std::vector<Entry> entries;
  size_t line_no = 0;
  for (size_t pos = 0; pos < contents.size();) {
    size_t end = contents.find('\n', pos);
    if (end == std::string::npos) end = contents.size();
    std::string_view line(contents.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      fail(path + ":" + std::to_string(line_no),
           "expected '<base64 token> <rank>', got " + single_quoted(line));
    }
    entries.push_back({line_no, line.substr(0, space), line.substr(space + 1)});
  }
  if (entries.empty()) fail(path, "empty file, expected lines '<base64 token> <rank>'");

  // With n lines, "each rank in [0, n) at most once" is the same as "each rank exactly once", so
  // a gap always shows up on a line as a rank that is too large.
  const size_t n = entries.size();
  std::vector<std::string> tokens(n);
  std::vector<size_t> line_of_rank(n, 0);
  for (const Entry& e : entries) {
    std::string where = path + ":" + std::to_string(e.line);
    std::optional<std::string> bytes = base64_decode(e.token);
    if (!bytes) fail(where, "invalid base64 " + single_quoted(e.token));
    int64_t rank = 0;
    if (!parse_rank(e.rank, rank)) fail(where, "rank " + single_quoted(e.rank) + " is not a number");
    if (rank >= static_cast<int64_t>(n)) {
      fail(where, "rank " + std::to_string(rank) + " is out of range: the file has " +
                      std::to_string(n) + " tokens, so ranks must be 0.." + std::to_string(n - 1) +
                      " and some rank is missing");
    }
    if (line_of_rank[rank] != 0) {
      fail(where, "rank " + std::to_string(rank) + " already given on line " +
                      std::to_string(line_of_rank[rank]));
    }
    line_of_rank[rank] = e.line;
    tokens[rank] = std::move(*bytes);
  }
  return Tokenizer(std::move(tokens), path, line_of_rank);
}

void Tokenizer::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) fail(tmp, std::string("cannot create: ") + std::strerror(errno));
  int error = 0;  // first errno seen
  std::string line;
  for (size_t rank = 0; rank < tokens_.size() && error == 0; ++rank) {
    line = base64_encode(tokens_[rank]);
    line += ' ';
    line += std::to_string(rank);
    line += '\n';
    if (std::fwrite(line.data(), 1, line.size(), file) != line.size()) error = errno ? errno : EIO;
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at unwritten data.
  if (error == 0 && (std::fflush(file) != 0 || ::fsync(fileno(file)) != 0)) error = errno;
  if (std::fclose(file) != 0 && error == 0) error = errno;
  if (error == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    std::remove(tmp.c_str());
    fail(path, std::string("cannot write: ") + std::strerror(error));
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (bos) ids.push_back(bos_id());
  MergeScratch scratch;
  for (std::string_view piece : pretokenizer_.split(text)) {
    // tiktoken takes a piece that is itself a token as is, even if merges could not reach it.
    scratch.key.assign(piece);
    if (auto it = ranks_.find(scratch.key); it != ranks_.end()) {
      ids.push_back(it->second);
    } else {
      merge_piece(piece, ranks_, byte_rank_, scratch, ids);
    }
  }
  if (eos) ids.push_back(eos_id());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id >= 0 && id < bos_id()) {
      text += tokens_[id];
    } else if (id == bos_id()) {
      text += kBosText;
    } else if (id == eos_id()) {
      text += kEosText;
    } else {
      fail("decode", "id " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(vocab_size()) + ")");
    }
  }
  return text;
}

}  // namespace ctitan::data
