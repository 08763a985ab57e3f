#include "ctitan/data/byte_source.h"

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "ctitan/common/error.h"

namespace ctitan::data {
namespace fs = std::filesystem;
namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;

[[noreturn]] void fail_dataset(const fs::path& file, const std::string& what) {
  throw InputError(fmt::format("dataset error: {}: {}", file.string(), what));
}

class PlainSource : public ByteSource {
 public:
  explicit PlainSource(const fs::path& file) : file_(file), in_(file, std::ios::binary) {
    if (!in_) fail_dataset(file_, fmt::format("cannot open: {}", std::strerror(errno)));
  }
  size_t read(char* buffer, size_t n) override {
    in_.read(buffer, std::streamsize(n));
    if (in_.bad()) fail_dataset(file_, "read error");
    return size_t(in_.gcount());
  }

 private:
  fs::path file_;
  std::ifstream in_;
};

// zlib's gz* interface reads concatenated gzip members as one stream, as `zcat` does.
class GzipSource : public ByteSource {
 public:
  explicit GzipSource(const fs::path& file) : file_(file) {
    gz_ = gzopen(file.c_str(), "rb");
    if (gz_ == nullptr) fail_dataset(file_, fmt::format("cannot open: {}", std::strerror(errno)));
    gzbuffer(gz_, kBufferBytes);
  }
  ~GzipSource() override { gzclose(gz_); }
  size_t read(char* buffer, size_t n) override {
    int got = gzread(gz_, buffer, unsigned(std::min<size_t>(n, 1u << 30)));
    // gzread passes a file that is not gzip through unchanged; a .gz name promises gzip.
    if (!checked_format_) {
      checked_format_ = true;
      if (got > 0 && gzdirect(gz_)) fail_dataset(file_, "not gzip data (the .gz name promises gzip)");
    }
    int code = Z_OK;
    const char* message = gzerror(gz_, &code);
    if (got < 0 || (code != Z_OK && code != Z_BUF_ERROR)) fail_dataset(file_, fmt::format("corrupt gzip data: {}", message));
    // zlib reports a member cut short only here: end of data with Z_BUF_ERROR pending.
    if (got == 0 && code == Z_BUF_ERROR) fail_dataset(file_, "truncated gzip data");
    return size_t(got);
  }

 private:
  fs::path file_;
  gzFile gz_ = nullptr;
  bool checked_format_ = false;
};

class ZstdSource : public ByteSource {
 public:
  explicit ZstdSource(const fs::path& file)
      : file_(file), raw_(file), in_buffer_(ZSTD_DStreamInSize()), stream_(ZSTD_createDStream()) {
    if (stream_ == nullptr) throw std::bad_alloc();
    ZSTD_initDStream(stream_);
    // Frames written with `zstd --long` need windows up to 2 GiB; the default cap is 128 MiB.
    ZSTD_DCtx_setParameter(stream_, ZSTD_d_windowLogMax, 31);
  }
  ~ZstdSource() override { ZSTD_freeDStream(stream_); }

  size_t read(char* buffer, size_t n) override {
    ZSTD_outBuffer out{buffer, n, 0};
    while (out.pos == 0) {
      if (in_.pos == in_.size) {
        in_ = {in_buffer_.data(), raw_.read(in_buffer_.data(), in_buffer_.size()), 0};
        if (in_.size == 0) {
          // A frame left open at the end of the file means the file was cut short.
          if (!frame_complete_) fail_dataset(file_, "truncated zstd data");
          return 0;
        }
      }
      size_t result = ZSTD_decompressStream(stream_, &out, &in_);
      if (ZSTD_isError(result)) fail_dataset(file_, fmt::format("corrupt zstd data: {}", ZSTD_getErrorName(result)));
      frame_complete_ = result == 0;
    }
    return out.pos;
  }

 private:
  fs::path file_;
  PlainSource raw_;
  std::vector<char> in_buffer_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  ZSTD_DStream* stream_;
  bool frame_complete_ = true;  // an empty file holds no frame, and is empty data
};

}  // namespace

Compression compression_of(const fs::path& file) {
  auto ext = file.extension();
  if (ext == ".gz") return Compression::kGzip;
  if (ext == ".zst") return Compression::kZstd;
  return Compression::kNone;
}

fs::path without_compression_suffix(const fs::path& file) {
  return compression_of(file) == Compression::kNone ? file : file.parent_path() / file.stem();
}

std::unique_ptr<ByteSource> open_byte_source(const fs::path& file) {
  switch (compression_of(file)) {
    case Compression::kGzip:
      return std::make_unique<GzipSource>(file);
    case Compression::kZstd:
      return std::make_unique<ZstdSource>(file);
    case Compression::kNone:
      break;
  }
  return std::make_unique<PlainSource>(file);
}

LineReader::LineReader(const fs::path& file)
    : file_(file), source_(open_byte_source(file)), buffer_(new char[kBufferBytes]) {}

bool LineReader::next(std::string& line) {
  line.clear();
  while (true) {
    const char* start = buffer_.get() + begin_;
    const void* newline = std::memchr(start, '\n', end_ - begin_);
    if (newline != nullptr) {
      size_t length = static_cast<const char*>(newline) - start;
      line.append(start, length);
      begin_ += length + 1;
      return true;
    }
    line.append(start, end_ - begin_);
    begin_ = end_ = 0;
    if (line.size() > kMaxLineBytes) {
      throw InputError(fmt::format("dataset error: {}: a line longer than {} MiB (no newline): not a text dataset",
                                   file_.string(), kMaxLineBytes >> 20));
    }
    if (eof_) return !line.empty();
    end_ = source_->read(buffer_.get(), kBufferBytes);
    if (end_ == 0) {
      eof_ = true;
      return !line.empty();
    }
  }
}

}  // namespace ctitan::data
