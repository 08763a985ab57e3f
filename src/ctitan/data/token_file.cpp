#include "ctitan/data/token_file.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ctitan/common/error.h"

namespace ctitan::data {
namespace {
constexpr char kMagic[8] = {'C', 'T', 'T', 'O', 'K', 'S', '0', '1'};
constexpr int64_t kHeaderBytes = 16;
}  // namespace

TokenFileWriter::TokenFileWriter(const std::string& path, uint32_t vocab_size) : path_(path) {
  out_.open(path_ + ".tmp", std::ios::binary | std::ios::trunc);
  if (!out_) throw IoError(fmt::format("cannot write token file {}.tmp", path_));
  uint32_t header[2] = {vocab_size, 0};
  out_.write(kMagic, sizeof(kMagic));
  out_.write(reinterpret_cast<const char*>(header), sizeof(header));
}

void TokenFileWriter::append(const std::vector<int32_t>& tokens) {
  out_.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 4));
  count_ += int64_t(tokens.size());
}

void TokenFileWriter::finish() {
  out_.close();
  if (!out_) throw IoError(fmt::format("failed writing token file {}.tmp", path_));
  std::error_code ec;
  std::filesystem::rename(path_ + ".tmp", path_, ec);
  if (ec) throw IoError(fmt::format("cannot rename {}.tmp to {}: {}", path_, path_, ec.message()));
  finished_ = true;
}

TokenFileWriter::~TokenFileWriter() {
  if (finished_) return;
  // A write that failed or was interrupted by an error leaves nothing behind.
  out_.close();
  std::error_code ignored;
  std::filesystem::remove(path_ + ".tmp", ignored);
}

TokenFileReader::TokenFileReader(const std::string& path) : path_(path) {
  in_.open(path, std::ios::binary);
  if (!in_) throw InputError(fmt::format("dataset error: cannot open token file {}", path));
  char magic[8];
  uint32_t header[2];
  in_.read(magic, 8);
  in_.read(reinterpret_cast<char*>(header), sizeof(header));
  if (!in_ || std::memcmp(magic, kMagic, 8) != 0) {
    throw InputError(fmt::format("dataset error: {} is not a ctitan token file (bad header)", path));
  }
  vocab_size_ = header[0];
  auto bytes = int64_t(std::filesystem::file_size(path)) - kHeaderBytes;
  if (bytes % 4 != 0) {
    throw InputError(fmt::format("dataset error: {} is truncated ({} payload bytes, not a multiple of 4)",
                                 path, bytes));
  }
  n_tokens_ = bytes / 4;
}

std::vector<int32_t> TokenFileReader::read(int64_t offset, int64_t count) {
  count = std::max<int64_t>(0, std::min(count, n_tokens_ - offset));
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  in_.clear();
  in_.seekg(kHeaderBytes + offset * 4);
  in_.read(reinterpret_cast<char*>(tokens.data()), count * 4);
  if (!in_) throw InputError(fmt::format("dataset error: read failed in {} at token {}", path_, offset));
  return tokens;
}

}  // namespace ctitan::data
