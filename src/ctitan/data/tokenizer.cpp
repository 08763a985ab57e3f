#include "ctitan/data/tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include "ctitan/common/error.h"
#include "ctitan/common/fnv_hash.h"
#include "ctitan/common/input_file.h"
#include "ctitan/common/path_text.h"
#include "ctitan/data/base64.h"
#include "ctitan/data/hf_tokenizer_json.h"

namespace ctitan::data {
namespace fs = std::filesystem;
namespace {

constexpr int32_t kNoRank = -1;
const char* const kBosText = "<|begin_of_text|>";
const char* const kEosText = "<|end_of_text|>";

[[noreturn]] void fail_tokenizer(const std::string& where, const std::string& what) {
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

// Base ranks as ids 0..n-1, then BOS and EOS, with tiktoken's merge rule.
TokenizerSpec tiktoken_spec(std::vector<std::string> tokens, const std::string& source) {
  TokenizerSpec spec;
  const auto n = static_cast<int32_t>(std::min<size_t>(tokens.size(), std::numeric_limits<int32_t>::max() - 2));
  spec.tokens = std::move(tokens);
  spec.special.assign(spec.tokens.size(), false);
  spec.tokens.push_back(kBosText);
  spec.tokens.push_back(kEosText);
  spec.special.push_back(true);
  spec.special.push_back(true);
  spec.bos_id = n;
  spec.eos_id = n + 1;
  spec.source = source;
  return spec;
}

}  // namespace

// Reused across the pieces of one encode() call so merging allocates only for long pieces.
// Nodes are the current tokens of the piece, named by their first byte offset; merging node i
// with its successor keeps i and retires the successor.
struct MergeScratch {
  std::vector<uint32_t> next;  // (n) end offset of node i = start of its successor; 0 = retired
  std::vector<uint32_t> prev;  // (n) start of the node before i
  std::vector<int32_t> token_id;     // (n) id of node i's bytes
  std::vector<int32_t> pair_priority;  // (n) priority of merging node i with its successor, or kNoRank
  std::vector<int32_t> pair_result;    // (n) id that merge would make
  std::vector<std::pair<int32_t, uint32_t>> heap;  // (pair priority, node), min first
  std::string key;
};

Tokenizer::PairMerge Tokenizer::merge_of(int32_t left_id, int32_t right_id, std::string_view joined,
                                         std::string& key) const {
  if (spec_.merge_rule == MergeRule::kTiktoken) {
    // tiktoken: the priority of a merge is the rank (= id) of the token it makes.
    key.assign(joined);
    auto it = ranks_.find(key);
    return it == ranks_.end() ? PairMerge{kNoRank, kNoRank} : PairMerge{it->second, it->second};
  }
  auto it = merge_table_.find(uint64_t(uint32_t(left_id)) << 32 | uint32_t(right_id));
  return it == merge_table_.end() ? PairMerge{kNoRank, kNoRank} : it->second;
}

// Byte-pair merge: repeatedly apply the adjacent merge of lowest priority, the leftmost on ties.
// tiktoken rescans all pairs per merge (quadratic in the piece); a heap with stale entries picks
// the same merge each step (as Hugging Face's BPE does) and keeps long pieces (CJK runs, base64
// blobs) at n log n. An entry is stale when its node was retired or its pair changed: a node's
// pair only grows, and distinct pairs have distinct priorities, so a stale entry never matches
// pair_priority again.
void Tokenizer::merge_piece(std::string_view piece, MergeScratch& s, std::vector<int32_t>& out) const {
  const auto n = static_cast<uint32_t>(piece.size());
  // The merge of node `a` with its successor, given the current links.
  auto pair_of = [&](uint32_t a) {
    uint32_t b = s.next[a];
    if (b >= n) return PairMerge{kNoRank, kNoRank};
    uint32_t end = s.next[b];
    return merge_of(s.token_id[a], s.token_id[b], piece.substr(a, end - a), s.key);
  };
  std::greater<std::pair<int32_t, uint32_t>> later;
  auto set_pair = [&](uint32_t a, bool push) {
    PairMerge m = pair_of(a);
    s.pair_priority[a] = m.priority;
    s.pair_result[a] = m.result;
    if (m.priority != kNoRank) {
      s.heap.emplace_back(m.priority, a);
      if (push) std::push_heap(s.heap.begin(), s.heap.end(), later);
    }
  };

  s.next.resize(n);
  s.prev.resize(n);
  s.token_id.resize(n);
  s.pair_priority.resize(n);
  s.pair_result.resize(n);
  s.heap.clear();
  for (uint32_t i = 0; i < n; ++i) {
    s.next[i] = i + 1;
    s.prev[i] = i - 1;  // unused for i == 0
    s.token_id[i] = byte_rank_[static_cast<uint8_t>(piece[i])];
  }
  for (uint32_t i = 0; i < n; ++i) set_pair(i, /*push=*/false);
  std::make_heap(s.heap.begin(), s.heap.end(), later);

  while (!s.heap.empty()) {
    auto [priority, i] = s.heap.front();
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    s.heap.pop_back();
    if (s.next[i] == 0 || s.pair_priority[i] != priority) continue;

    uint32_t j = s.next[i];  // successor, absorbed into i
    uint32_t k = s.next[j];  // node after the merged token, or n
    s.next[i] = k;
    s.next[j] = 0;
    s.token_id[i] = s.pair_result[i];
    if (k < n) s.prev[k] = i;
    set_pair(i, /*push=*/true);
    if (i > 0) set_pair(s.prev[i], /*push=*/true);
  }
  for (uint32_t i = 0; i < n; i = s.next[i]) out.push_back(s.token_id[i]);
}

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)), pretokenizer_(spec_.split_pattern) {
  const std::string& source = spec_.source;
  const size_t n = spec_.tokens.size();
  if (n == 0) fail_tokenizer(source, "no tokens");
  if (spec_.special.size() != n) throw std::logic_error("TokenizerSpec: special has the wrong length");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail_tokenizer(source, std::to_string(n) + " tokens do not fit in int32 ids");
  }
  ranks_.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    if (spec_.tokens[id].empty()) fail_tokenizer(source, "token id " + std::to_string(id) + " is empty");
    if (spec_.special[id]) continue;
    ++n_base_;
    auto [it, inserted] = ranks_.emplace(spec_.tokens[id], static_cast<int32_t>(id));
    if (!inserted) {
      fail_tokenizer(source, "token " + single_quoted(spec_.tokens[id]) + " has two ids, " + std::to_string(it->second) +
                       " and " + std::to_string(id));
    }
  }
  for (auto [name, id] : {std::pair{"BOS", spec_.bos_id}, std::pair{"EOS", spec_.eos_id}}) {
    if (id < 0 || size_t(id) >= n || !spec_.special[size_t(id)]) {
      fail_tokenizer(source, std::string(name) + " id " + std::to_string(id) + " is not a special token");
    }
  }
  // Every piece must be able to fall back to single bytes, or some text could not be encoded.
  for (int b = 0; b < 256; ++b) {
    auto it = ranks_.find(std::string(1, static_cast<char>(b)));
    if (it == ranks_.end()) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", b);
      fail_tokenizer(source, std::string("no token for byte ") + hex + " (all 256 single bytes are needed)");
    }
    byte_rank_[b] = it->second;
  }
  if (spec_.merge_rule == MergeRule::kTiktoken && !spec_.merges.empty()) {
    throw std::logic_error("TokenizerSpec: merges given with tiktoken's merge rule");
  }
  merge_table_.reserve(spec_.merges.size());
  for (size_t priority = 0; priority < spec_.merges.size(); ++priority) {
    auto [left, right] = spec_.merges[priority];
    auto bad = [&](int32_t id) { return id < 0 || size_t(id) >= n || spec_.special[size_t(id)]; };
    if (bad(left) || bad(right)) fail_tokenizer(source, "merge " + std::to_string(priority) + " names a token that is not in the vocabulary");
    auto joined = ranks_.find(spec_.tokens[size_t(left)] + spec_.tokens[size_t(right)]);
    if (joined == ranks_.end()) {
      fail_tokenizer(source, "merge " + std::to_string(priority) + " makes " +
                       single_quoted(spec_.tokens[size_t(left)] + spec_.tokens[size_t(right)]) +
                       ", which is not in the vocabulary");
    }
    uint64_t key = uint64_t(uint32_t(left)) << 32 | uint32_t(right);
    // Hugging Face collects the list into a map, so of duplicated merges the last one counts.
    merge_table_[key] = PairMerge{static_cast<int32_t>(priority), joined->second};
  }
}

bool Tokenizer::fits_tiktoken_format() const {
  const auto n = static_cast<int32_t>(n_base_);
  if (spec_.merge_rule != MergeRule::kTiktoken || vocab_size() != n_base_ + 2) return false;
  return spec_.bos_id == n && spec_.eos_id == n + 1 && spec_.tokens[size_t(n)] == kBosText &&
         spec_.tokens[size_t(n) + 1] == kEosText;
}

Tokenizer Tokenizer::from_ranks(std::vector<std::string> token_bytes_by_rank) {
  return Tokenizer(tiktoken_spec(std::move(token_bytes_by_rank), "token list"));
}

Tokenizer Tokenizer::load_tiktoken(const std::string& path) {
  if (auto why = unreadable_input_reason(path, kMaxTokenizerFileBytes)) fail_tokenizer(path, *why);
  std::ifstream file(path, std::ios::binary);
  if (!file) fail_tokenizer(path + relative_path_note(path), std::string("cannot open: ") + std::strerror(errno));
  std::stringstream buffer;
  buffer << file.rdbuf();
  if (file.bad()) fail_tokenizer(path, std::string("cannot read: ") + std::strerror(errno));
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
      fail_tokenizer(path + ":" + std::to_string(line_no),
           "expected '<base64 token> <rank>', got " + single_quoted(line));
    }
    entries.push_back({line_no, line.substr(0, space), line.substr(space + 1)});
  }
  if (entries.empty()) fail_tokenizer(path, "empty file, expected lines '<base64 token> <rank>'");

  // With n lines, "each rank in [0, n) at most once" is the same as "each rank exactly once", so
  // a gap always shows up on a line as a rank that is too large.
  const size_t n = entries.size();
  std::vector<std::string> tokens(n);
  std::vector<size_t> line_of_rank(n, 0);
  for (const Entry& e : entries) {
    std::string where = path + ":" + std::to_string(e.line);
    std::optional<std::string> bytes = base64_decode(e.token);
    if (!bytes) fail_tokenizer(where, "invalid base64 " + single_quoted(e.token));
    int64_t rank = 0;
    if (!parse_rank(e.rank, rank)) fail_tokenizer(where, "rank " + single_quoted(e.rank) + " is not a number");
    if (rank >= static_cast<int64_t>(n)) {
      fail_tokenizer(where, "rank " + std::to_string(rank) + " is out of range: the file has " +
                      std::to_string(n) + " tokens, so ranks must be 0.." + std::to_string(n - 1) +
                      " and some rank is missing");
    }
    if (line_of_rank[rank] != 0) {
      fail_tokenizer(where, "rank " + std::to_string(rank) + " already given on line " +
                      std::to_string(line_of_rank[rank]));
    }
    line_of_rank[rank] = e.line;
    tokens[rank] = std::move(*bytes);
  }
  // Checked here too, where the line of each rank is known.
  std::unordered_map<std::string_view, size_t> rank_of_token;
  for (size_t rank = 0; rank < n; ++rank) {
    std::string where = path + ":" + std::to_string(line_of_rank[rank]);
    if (tokens[rank].empty()) fail_tokenizer(where, "empty token");
    auto [it, inserted] = rank_of_token.emplace(tokens[rank], rank);
    if (!inserted) {
      fail_tokenizer(where, "token " + single_quoted(base64_encode(tokens[rank])) + " already has rank " +
                      std::to_string(it->second));
    }
  }
  return Tokenizer(tiktoken_spec(std::move(tokens), path));
}

void Tokenizer::save(const std::string& path) const {
  if (!fits_tiktoken_format()) {
    fail_tokenizer(path, "this tokenizer (from " + spec_.source +
                   ") has special tokens or merge rules a tiktoken rank file cannot hold; write tokenizer.json");
  }
  const auto& tokens_ = spec_.tokens;
  const auto n_base = static_cast<size_t>(n_base_);
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) fail_tokenizer(tmp, std::string("cannot create: ") + std::strerror(errno));
  int error = 0;  // first errno seen
  std::string line;
  for (size_t rank = 0; rank < n_base && error == 0; ++rank) {
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
    fail_tokenizer(path, std::string("cannot write: ") + std::strerror(error));
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (bos) ids.push_back(bos_id());
  MergeScratch scratch;
  std::vector<std::string_view> pieces;
  try {
    pieces = pretokenizer_.split(text);
  } catch (const InputError& e) {
    // A split pattern that backtracks past PCRE2's match limit: the file that holds it is the culprit.
    throw InputError(fmt::format("{} (the split pattern of {})", e.what(), spec_.source));
  }
  for (std::string_view piece : pieces) {
    // tiktoken takes a piece that is itself a token as is, even if merges could not reach it.
    scratch.key.assign(piece);
    if (auto it = spec_.ignore_merges ? ranks_.find(scratch.key) : ranks_.end(); it != ranks_.end()) {
      ids.push_back(it->second);
    } else {
      merge_piece(piece, scratch, ids);
    }
  }
  if (eos) ids.push_back(eos_id());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      fail_tokenizer("decode", "id " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(vocab_size()) + ")");
    }
    text += spec_.tokens[size_t(id)];
  }
  return text;
}

fs::path tokenizer_file(const std::string& path) {
  fs::path file = path;
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    if (fs::exists(file / "tokenizer.json")) return file / "tokenizer.json";
    if (fs::exists(file / "tokenizer.model")) return file / "tokenizer.model";
    fail_tokenizer(path, "directory holds neither tokenizer.json nor tokenizer.model");
  }
  return file;
}

Tokenizer Tokenizer::load(const std::string& path) {
  const fs::path file = tokenizer_file(path);
  if (file.extension() == ".json") return load_hf_tokenizer_json(file);
  return load_tiktoken(file.string());
}

std::string Tokenizer::fingerprint() const {
  Fnv1a64 hash;
  hash.add_integer(vocab_size()).add_integer(spec_.bos_id).add_integer(spec_.eos_id);
  for (size_t id = 0; id < spec_.tokens.size(); ++id) hash.add_field(spec_.tokens[id]).add_integer(spec_.special[id]);
  return hash.hex();
}

}  // namespace ctitan::data
