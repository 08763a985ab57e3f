#pragma once
// A dataset file read as a stream of bytes, decompressed on the fly by its extension: `.gz`
// (zlib, any number of gzip members) and `.zst` (libzstd, any number of frames). Only a fixed
// buffer is held, so a file of any size streams in constant memory.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

namespace ctitan::data {

enum class Compression { kNone, kGzip, kZstd };

// `.gz` -> kGzip, `.zst` -> kZstd, anything else -> kNone.
Compression compression_of(const std::filesystem::path& file);

// `path` without a `.gz`/`.zst` suffix: what decides the format of the data inside.
std::filesystem::path without_compression_suffix(const std::filesystem::path& file);

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Fills up to `n` bytes; returns 0 only at the end of the data. Throws InputError naming the
  // file for unreadable, corrupt or truncated data.
  virtual size_t read(char* buffer, size_t n) = 0;
};

std::unique_ptr<ByteSource> open_byte_source(const std::filesystem::path& file);

// Lines of a ByteSource, without their '\n' (a final line without one is still a line).
class LineReader {
 public:
  // A line (or, for DocumentReader, a document) longer than this is an InputError naming the
  // file: a file without newlines must not grow memory without bound.
  static constexpr size_t kMaxLineBytes = size_t(256) << 20;

  explicit LineReader(const std::filesystem::path& file);
  bool next(std::string& line);
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
  std::unique_ptr<ByteSource> source_;
  std::unique_ptr<char[]> buffer_;
  size_t begin_ = 0, end_ = 0;  // unread bytes are buffer_[begin_, end_)
  bool eof_ = false;
};

}  // namespace ctitan::data
