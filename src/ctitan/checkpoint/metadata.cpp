#include "ctitan/checkpoint/metadata.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ctitan/common/dtype_names.h"
#include "ctitan/common/error.h"

namespace ctitan::checkpoint {
namespace {

void fsync_path(const std::filesystem::path& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) throw IoError(fmt::format("checkpoint error: cannot open {}: {}", path.string(), std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw IoError(fmt::format("checkpoint error: fsync {}: {}", path.string(), std::strerror(err)));
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
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64: stable across builds, unlike std::hash
  for (unsigned char c : config_toml) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

std::string box_text(const std::vector<int64_t>& offsets, const std::vector<int64_t>& shape) {
  std::vector<std::string> ranges;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t lo = d < offsets.size() ? offsets[d] : 0;
    ranges.push_back(fmt::format("{}:{}", lo, lo + shape[d]));
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
  e.rank = je.at("rank").get<int>();
  e.dtype = je.at("dtype").get<std::string>();
  e.global_shape = je.at("global_shape").get<std::vector<int64_t>>();
  e.shape = je.at("shape").get<std::vector<int64_t>>();
  if (je.contains("offsets")) {
    e.offsets = je.at("offsets").get<std::vector<int64_t>>();
  } else {  // format of checkpoints saved before tensor parallelism: dim-0 slices only
    e.offsets.assign(e.shape.size(), 0);
    if (!e.offsets.empty()) e.offsets[0] = je.at("row_offset").get<int64_t>();
  }
  e.file = je.at("file").get<std::string>();
  e.offset = je.at("offset").get<int64_t>();
  e.nbytes = je.at("nbytes").get<int64_t>();
  e.crc32 = je.at("crc32").get<uint32_t>();
  return e;
}

std::string to_json(const Metadata& m) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : m.entries) entries.push_back(entry_to_json(e));
  nlohmann::json j = {{"format", "ctitan-checkpoint"}, {"version", m.version},     {"step", m.step},
                      {"model_only", m.model_only},    {"world_size", m.world_size}, {"dp_degree", m.dp_degree},
                      {"dp_rank_of", m.dp_rank_of},    {"config_hash", m.config_hash},
                      {"config", m.config_toml},       {"entries", entries}};
  return j.dump(1);
}

Metadata metadata_from_json(const std::string& text, const std::string& where) {
  try {
    auto j = nlohmann::json::parse(text);
    if (j.at("format") != "ctitan-checkpoint") throw InputError("not a ctitan checkpoint");
    Metadata m;
    m.version = j.at("version").get<int>();
    if (m.version != kFormatVersion) {
      throw InputError(fmt::format("format version {} (this build reads {})", m.version, kFormatVersion));
    }
    m.step = j.at("step").get<int64_t>();
    m.model_only = j.at("model_only").get<bool>();
    m.world_size = j.at("world_size").get<int>();
    m.dp_degree = j.at("dp_degree").get<int>();
    m.dp_rank_of = j.at("dp_rank_of").get<std::vector<int>>();
    m.config_hash = j.at("config_hash").get<std::string>();
    m.config_toml = j.at("config").get<std::string>();
    for (const auto& je : j.at("entries")) m.entries.push_back(entry_from_json(je));
    return m;
  } catch (const InputError& e) {
    throw InputError(fmt::format("checkpoint error: {}: {}", where, e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("checkpoint error: {}: invalid metadata ({})", where, e.what()));
  }
}

Metadata read_metadata(const std::filesystem::path& step_dir) {
  auto path = step_dir / kMetadataFile;
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("checkpoint error: {} is missing: not a complete checkpoint", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return metadata_from_json(text.str(), path.string());
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  auto tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw IoError(fmt::format("checkpoint error: cannot create {}: {}", tmp.string(), std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError(fmt::format("checkpoint error: writing {}: {}", tmp.string(), std::strerror(err)));
    }
    done += size_t(n);
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) {
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("checkpoint error: fsync {}: {}", tmp.string(), std::strerror(err)));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw IoError(fmt::format("checkpoint error: rename {}: {}", tmp.string(), ec.message()));
  fsync_path(path.parent_path(), O_RDONLY | O_DIRECTORY);  // makes the rename itself durable
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
