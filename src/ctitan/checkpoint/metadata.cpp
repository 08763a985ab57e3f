#include "ctitan/checkpoint/metadata.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <tuple>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ctitan/common/dtype_names.h"
#include "ctitan/common/error.h"
#include "ctitan/common/fnv_hash.h"
#include "ctitan/common/message_text.h"

namespace ctitan::checkpoint {
namespace {

// metadata.json is read from disk: a number must be an integer of the field's range, never a
// float (nlohmann's get<int>() of 1e300 is undefined behaviour) or a value that wraps.
template <typename T>
T integer_field(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  constexpr auto lo = std::numeric_limits<T>::min();
  constexpr auto hi = std::numeric_limits<T>::max();
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= uint64_t(hi)) return T(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    const auto x = v.get<int64_t>();
    if (x >= int64_t(lo) && (hi > uint64_t(std::numeric_limits<int64_t>::max()) || x <= int64_t(hi))) return T(x);
  }
  throw InputError(fmt::format("\"{}\" must be an integer in [{}, {}] (got {})", key, lo, hi, one_line(v.dump())));
}

std::vector<int64_t> dims_field(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_array()) throw InputError(fmt::format("\"{}\" must be a list of integers", key));
  std::vector<int64_t> dims;
  for (const auto& d : v) {
    if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0) ||
        (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))) {
      throw InputError(fmt::format("\"{}\" must be a list of integers >= 0 (got {})", key, one_line(d.dump())));
    }
    dims.push_back(d.get<int64_t>());
  }
  return dims;
}

// What the reader relies on: the slice lies inside its global tensor, a known dtype, and nbytes
// equal to the slice's size, all computed without overflow.
void check_entry(const SliceEntry& e) {
  const auto where = fmt::format("entry {}/{}", one_line(e.part), one_line(e.key));
  auto bad = [&](const std::string& what) { throw InputError(fmt::format("{}: {}", where, what)); };
  const auto dtype = dtype_from_name(e.dtype);
  if (!dtype) bad(fmt::format("unknown dtype '{}'", one_line(e.dtype)));
  if (e.shape.size() != e.global_shape.size() || e.offsets.size() != e.shape.size()) {
    bad("offsets, shape and global_shape differ in rank");
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t slice_bytes = int64_t(c10::elementSize(*dtype)), global_bytes = slice_bytes;
  for (size_t d = 0; d < e.shape.size(); ++d) {
    if (e.offsets[d] < 0 || e.offsets[d] > e.global_shape[d] || e.shape[d] > e.global_shape[d] - e.offsets[d]) {
      bad(fmt::format("slice {} is outside the global shape [{}]", box_text(e.offsets, e.shape),
                      fmt::join(e.global_shape, ", ")));
    }
    for (auto [bytes, n] : {std::pair{&slice_bytes, e.shape[d]}, {&global_bytes, e.global_shape[d]}}) {
      if (n != 0 && *bytes > kMax / n) bad(fmt::format("global shape [{}] is too large", fmt::join(e.global_shape, ", ")));
      *bytes *= n;
    }
  }
  if (e.nbytes != slice_bytes) bad(fmt::format("nbytes is {} but the {} slice {} takes {}", e.nbytes, e.dtype,
                                               box_text(e.offsets, e.shape), slice_bytes));
  if (e.offset < 0 || e.offset > kMax - e.nbytes) bad(fmt::format("file offset {} is out of range", e.offset));
  if (e.rank < -1) bad(fmt::format("rank {} is not a rank (or -1)", e.rank));
}

}  // namespace

std::string entry_dtype_name(torch::ScalarType t) {
  if (auto name = dtype_name(t)) return *name;
  throw std::logic_error(fmt::format("checkpoint: a state tensor has dtype {}, which checkpoints do not store",
                                     c10::toString(t)));
}

torch::ScalarType entry_dtype(const std::string& name, const std::string& where) {
  if (auto dtype = dtype_from_name(name)) return *dtype;
  throw InputError(fmt::format("checkpoint error: {}: unknown dtype '{}'", where, name));
}

std::string config_hash(const std::string& config_toml) {
  // This offset, not FNV's 14695981039346656037 (a digit short), is what every checkpoint's
  // config_hash was computed from: kept, so that a resume with an unchanged config still matches.
  return Fnv1a64(1469598103934665603ull).add(config_toml).hex();
}

std::string box_text(const std::vector<int64_t>& offsets, const std::vector<int64_t>& shape) {
  std::vector<std::string> ranges;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t lo = d < offsets.size() ? offsets[d] : 0, hi = 0;
    // Also names boxes of a malformed metadata.json, whose ends may not fit in int64.
    if (__builtin_add_overflow(lo, shape[d], &hi)) {
      ranges.push_back(fmt::format("{}:{}+{}", lo, lo, shape[d]));
    } else {
      ranges.push_back(fmt::format("{}:{}", lo, hi));
    }
  }
  return fmt::format("[{}]", fmt::join(ranges, ", "));
}

nlohmann::json entry_to_json(const SliceEntry& e) {
  return {{"part", e.part}, {"key", e.key}, {"rank", e.rank}, {"dtype", e.dtype},
          {"global_shape", e.global_shape}, {"shape", e.shape}, {"offsets", e.offsets},
          {"file", e.file}, {"offset", e.offset}, {"nbytes", e.nbytes}, {"crc32", e.crc32}};
}

SliceEntry entry_from_json(const nlohmann::json& je) {
  SliceEntry e;
  e.part = je.at("part").get<std::string>();
  e.key = je.at("key").get<std::string>();
  e.rank = integer_field<int>(je, "rank");
  e.dtype = je.at("dtype").get<std::string>();
  e.global_shape = dims_field(je, "global_shape");
  e.shape = dims_field(je, "shape");
  if (je.contains("offsets")) {
    e.offsets = dims_field(je, "offsets");
  } else {  // format of checkpoints saved before tensor parallelism: dim-0 slices only
    e.offsets.assign(e.shape.size(), 0);
    if (!e.offsets.empty()) e.offsets[0] = integer_field<int64_t>(je, "row_offset");
  }
  e.file = je.at("file").get<std::string>();
  e.offset = integer_field<int64_t>(je, "offset");
  e.nbytes = integer_field<int64_t>(je, "nbytes");
  e.crc32 = integer_field<uint32_t>(je, "crc32");
  return e;
}

std::string to_json(const Metadata& m) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : m.entries) entries.push_back(entry_to_json(e));
  nlohmann::json j = {{"format", "ctitan-checkpoint"}, {"version", m.version},     {"step", m.step},
                      {"model_only", m.model_only},    {"world_size", m.world_size}, {"dp_degree", m.dp_degree},
                      {"dp_rank_of", m.dp_rank_of},    {"config_hash", m.config_hash},
                      {"config", m.config_toml},       {"entries", entries}};
  if (!m.tokenizer_fingerprint.empty()) j["tokenizer_fingerprint"] = m.tokenizer_fingerprint;
  return j.dump(1);
}

Metadata metadata_from_json(const std::string& text, const std::string& where) {
  try {
    auto j = nlohmann::json::parse(text);
    if (j.at("format") != "ctitan-checkpoint") throw InputError("not a ctitan checkpoint");
    Metadata m;
    m.version = integer_field<int>(j, "version");
    if (m.version != kFormatVersion) {
      throw InputError(fmt::format("format version {} (this build reads {})", m.version, kFormatVersion));
    }
    m.step = integer_field<int64_t>(j, "step");
    m.model_only = j.at("model_only").get<bool>();
    m.world_size = integer_field<int>(j, "world_size");
    m.dp_degree = integer_field<int>(j, "dp_degree");
    for (const auto& r : j.at("dp_rank_of")) {
      if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() > std::numeric_limits<int>::max()) {
        throw InputError("\"dp_rank_of\" must list data-parallel ranks (integers >= 0)");
      }
      m.dp_rank_of.push_back(int(r.get<int64_t>()));
    }
    if (m.step < 0 || m.world_size < 1 || m.dp_degree < 1) {
      throw InputError(fmt::format("step {}, world_size {}, dp_degree {}: step must be >= 0, the others >= 1", m.step,
                                   m.world_size, m.dp_degree));
    }
    if (m.dp_rank_of.size() != size_t(m.world_size)) {  // one per saving rank: the loader indexes it by rank
      throw InputError(fmt::format("\"dp_rank_of\" has {} ranks for world_size {}", m.dp_rank_of.size(), m.world_size));
    }
    m.config_hash = j.at("config_hash").get<std::string>();
    m.config_toml = j.at("config").get<std::string>();
    // Optional: checkpoints written before it, and those of jobs without a tokenizer, have none.
    if (j.contains("tokenizer_fingerprint")) m.tokenizer_fingerprint = j.at("tokenizer_fingerprint").get<std::string>();
    // One slice per (part, key, saving rank, box: offsets and shape): a second would be read over
    // the first. A rank outside the world (-1: a part every rank shares) has no place to load from.
    std::set<std::tuple<std::string, std::string, int, std::vector<int64_t>, std::vector<int64_t>>> seen;
    for (const auto& je : j.at("entries")) {
      m.entries.push_back(entry_from_json(je));
      const auto& e = m.entries.back();
      check_entry(e);
      if (e.rank < -1 || e.rank >= m.world_size) {
        throw InputError(fmt::format("entry {}/{} was saved by rank {}, outside world_size {}", e.part, e.key, e.rank,
                                     m.world_size));
      }
      if (!seen.emplace(e.part, e.key, e.rank, e.offsets, e.shape).second) {
        throw InputError(fmt::format("entry {}/{} of rank {} at {} appears twice", e.part, e.key, e.rank,
                                     box_text(e.offsets, e.shape)));
      }
    }
    return m;
  } catch (const InputError& e) {
    throw InputError(fmt::format("checkpoint error: {}: {}", where, one_line(e.what())));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("checkpoint error: {}: invalid metadata ({})", where, one_line(e.what())));
  }
}

Metadata read_metadata(const std::filesystem::path& step_dir) {
  // A path that is not a directory would be named as "<path>/metadata.json is missing".
  std::error_code ec;
  if (!std::filesystem::exists(step_dir, ec)) {
    throw InputError(fmt::format("checkpoint error: {} does not exist", step_dir.string()));
  }
  if (!std::filesystem::is_directory(step_dir, ec)) {
    throw InputError(fmt::format("checkpoint error: {} is not a directory (a checkpoint is a step-N directory)",
                                 step_dir.string()));
  }
  auto path = step_dir / kMetadataFile;
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("checkpoint error: {} is missing: not a complete checkpoint", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return metadata_from_json(text.str(), path.string());
}

std::string step_dir_name(int64_t step) { return fmt::format("step-{}", step); }

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (int64_t(1) << 52)) return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

}  // namespace ctitan::checkpoint
