#include "ctitan/metrics/tensorboard_writer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "ctitan/common/error.h"

namespace ctitan::metrics {
namespace {

// Protobuf wire format, the three kinds an Event needs. A key is (field number << 3) | wire type.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian, as protobuf's fixed32/fixed64 (x86 and ARM are LE)
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, uint64_t(field) << 3 | 2);  // length-delimited
  put_varint(out, bytes.size());
  out += bytes;
}

// Event { double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; } }
std::string event(int64_t step, const std::string& file_version, const std::string& summary) {
  const double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string e;
  put_varint(e, 1 << 3 | 1);  // fixed64
  put_fixed(e, wall_time);
  put_varint(e, 2 << 3 | 0);  // varint
  put_varint(e, uint64_t(step));
  if (!file_version.empty()) put_bytes_field(e, 3, file_version);
  if (!summary.empty()) put_bytes_field(e, 5, summary);
  return e;
}

const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli polynomial
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto& table = crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = (std::filesystem::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}.0", seconds, host, getpid())).string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw IoError(fmt::format("cannot write TensorBoard file {}", path_));
  write_record(event(0, "brain.Event:2", ""));
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string value_msg;
  put_bytes_field(value_msg, 1, tag);
  put_varint(value_msg, 2 << 3 | 5);  // fixed32
  put_fixed(value_msg, float(value));
  std::string summary;
  put_bytes_field(summary, 1, value_msg);
  write_record(event(step, "", summary));
}

void TensorBoardWriter::write_record(const std::string& event) {
  const uint64_t length = event.size();
  const uint32_t length_crc = masked_crc32c(&length, sizeof(length));
  const uint32_t data_crc = masked_crc32c(event.data(), event.size());
  out_.write(reinterpret_cast<const char*>(&length), sizeof(length));
  out_.write(reinterpret_cast<const char*>(&length_crc), sizeof(length_crc));
  out_.write(event.data(), std::streamsize(event.size()));
  out_.write(reinterpret_cast<const char*>(&data_crc), sizeof(data_crc));
  if (!out_) throw IoError(fmt::format("writing TensorBoard file {} failed", path_));
}

void TensorBoardWriter::flush() {
  out_.flush();
  if (!out_) throw IoError(fmt::format("writing TensorBoard file {} failed", path_));
}

}  // namespace ctitan::metrics
