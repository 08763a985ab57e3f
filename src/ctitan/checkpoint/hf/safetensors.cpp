#include "ctitan/checkpoint/hf/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>
#include <utility>

#include "ctitan/common/error.h"
#include "ctitan/common/message_text.h"

namespace ctitan::checkpoint::hf {
namespace {

// The dtypes ctitan writes or may meet in an HF Llama export; the rest of the format's codes
// (F8_*, U16, ...) are not Llama weights ctitan loads and are rejected by name.
constexpr std::array<std::pair<const char*, torch::ScalarType>, 9> kDtypes{{
    {"F32", torch::kFloat}, {"BF16", torch::kBFloat16}, {"F16", torch::kHalf},
    {"F64", torch::kDouble}, {"I64", torch::kLong}, {"I32", torch::kInt},
    {"I16", torch::kShort}, {"I8", torch::kChar}, {"U8", torch::kByte},
}};

// The header is an untrusted length read from the file: cap it before allocating.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// `what` quotes the header's tensor names, dtypes and metadata keys: one_line keeps the message
// on one line whatever they hold.
[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw InputError(fmt::format("safetensors {}: {}", path.string(), one_line(what)));
}

torch::ScalarType scalar_type_of(const std::filesystem::path& path, const std::string& name,
                                 const std::string& code) {
  for (const auto& [c, t] : kDtypes) {
    if (code == c) return t;
  }
  fail(path, fmt::format("tensor '{}' has unknown dtype '{}'", name, code));
}

uint64_t read_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

// One header entry, checked on its own against the data section of `data_size` bytes.
struct Entry {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::filesystem::path& path, const std::string& name, const nlohmann::json& j,
                  uint64_t data_size) {
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets") ||
      !j["dtype"].is_string() || !j["shape"].is_array() || !j["data_offsets"].is_array() ||
      j["data_offsets"].size() != 2) {
    fail(path, fmt::format("bad header: tensor '{}' needs dtype, shape and data_offsets [begin, end]", name));
  }
  Entry e{name, scalar_type_of(path, name, j["dtype"].get<std::string>()), {}, 0, 0};
  // The element count as the reference reader computes it: a product from the left, refused on
  // overflow (a shape [2^62, 2^62] would otherwise wrap to 0 bytes and pass the size check).
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : j["shape"]) {
    if (!d.is_number_unsigned()) fail(path, fmt::format("bad header: tensor '{}' has a non-integer dimension", name));
    auto size = d.get<uint64_t>();
    overflow = overflow || size > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, size, &numel);
    e.shape.push_back(static_cast<int64_t>(size));
  }
  uint64_t expected = 0;
  if (overflow || __builtin_mul_overflow(numel, uint64_t(c10::elementSize(e.dtype)), &expected) ||
      expected > uint64_t(INT64_MAX)) {
    fail(path, fmt::format("tensor '{}' has shape {}: its byte size overflows 64 bits", name, j["shape"].dump()));
  }
  for (const auto& o : j["data_offsets"]) {
    if (!o.is_number_unsigned()) fail(path, fmt::format("bad header: tensor '{}' has a non-integer offset", name));
  }
  e.begin = j["data_offsets"][0].get<uint64_t>();
  e.end = j["data_offsets"][1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_size) {
    fail(path, fmt::format("tensor '{}' data_offsets [{}, {}) out of range (data section has {} bytes)", name,
                           e.begin, e.end, data_size));
  }
  if (e.end - e.begin != expected) {
    fail(path, fmt::format("tensor '{}' spans {} bytes but its shape and dtype need {}", name, e.end - e.begin,
                           expected));
  }
  return e;
}

// The format requires the tensors to tile the data section exactly: no byte shared by two
// tensors (an overlap would load one tensor's bytes into another), none unowned (a gap can hide
// a second payload), none after the last tensor. The reference reader (safetensors 0.8) refuses
// the same three. Empty tensors take no bytes and may sit at any boundary.
void check_layout(const std::filesystem::path& path, std::vector<const Entry*> entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  uint64_t covered = 0;  // bytes [0, covered) belong to the tensors seen so far
  const Entry* last = nullptr;
  for (const Entry* e : entries) {
    if (e->begin < covered) {
      fail(path, fmt::format("tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data section", last->name,
                             last->begin, last->end, e->name, e->begin, e->end));
    }
    if (e->begin > covered) {
      fail(path, fmt::format("data section bytes [{}, {}) before tensor '{}' belong to no tensor (the format "
                             "allows no gaps)", covered, e->begin, e->name));
    }
    if (e->end > covered) {
      covered = e->end;
      last = e;
    }
  }
  if (covered != data_size) {
    fail(path, fmt::format("data section bytes [{}, {}) after the last tensor belong to no tensor (the format "
                           "allows no trailing data)", covered, data_size));
  }
}

}  // namespace

std::string safetensors_dtype(torch::ScalarType dtype) {
  for (const auto& [c, t] : kDtypes) {
    if (t == dtype) return c;
  }
  throw InputError(fmt::format("safetensors: dtype {} has no safetensors code", c10::toString(dtype)));
}

int64_t tensor_bytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto bytes = static_cast<uint64_t>(tensor_bytes(t));
    header[name] = {{"dtype", safetensors_dtype(t.scalar_type())}, {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "cannot open for writing");
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, t] : tensors) {
      // Little-endian host assumed (x86/ARM): the bytes in memory are the bytes on disk.
      auto c = t.detach().to(torch::kCPU).contiguous();
      out.write(static_cast<const char*>(c.data_ptr()), tensor_bytes(c));
    }
    out.flush();
    if (!out) fail(path, "write failed (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

SafetensorsFile load_safetensors(const std::filesystem::path& path) {
  std::error_code ec;
  auto file_size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  if (file_size < 8) fail(path, fmt::format("truncated file ({} bytes, no header length)", file_size));
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t header_size = read_u64_le(len);
  if (header_size > kMaxHeaderBytes || header_size > file_size - 8) {
    fail(path, fmt::format("truncated file or bad header: header length {} but file has {} bytes", header_size,
                           file_size));
  }
  std::string text(header_size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("bad header: not JSON ({})", e.what()));
  }
  if (!header.is_object()) fail(path, "bad header: not a JSON object");

  SafetensorsFile result;
  uint64_t data_start = 8 + header_size, data_size = file_size - data_start;
  std::vector<Entry> entries;
  for (const auto& [name, j] : header.items()) {
    if (name == "__metadata__") {
      if (!j.is_object()) fail(path, "bad header: __metadata__ is not an object");
      for (const auto& [k, v] : j.items()) {
        if (!v.is_string()) fail(path, fmt::format("bad header: __metadata__ '{}' is not a string", k));
        result.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, j, data_size));
  }
  std::vector<const Entry*> layout;
  for (const auto& e : entries) layout.push_back(&e);
  check_layout(path, layout, data_size);

  for (const auto& e : entries) {
    torch::Tensor t;
    try {
      t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    } catch (const c10::Error& err) {
      // Sizes that pass the checks above but not libtorch's (or the memory there is).
      std::string why = err.what_without_backtrace();
      fail(path, fmt::format("tensor '{}' cannot be allocated: {}", e.name, why.substr(0, why.find('\n'))));
    }
    in.seekg(static_cast<std::streamoff>(data_start + e.begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    if (!in) fail(path, fmt::format("read of tensor '{}' failed", e.name));
    result.tensors.emplace(e.name, std::move(t));
  }
  return result;
}

}  // namespace ctitan::checkpoint::hf
