#pragma once
// Pre-tokenized corpora: a 16-byte header ("CTTOKS01", uint32 vocab_size, uint32 reserved)
// followed by little-endian uint32 token ids. Written by `ctitan data prepare`.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ctitan::data {

class TokenFileWriter {
 public:
  // Writes to `path + ".tmp"` and renames on finish(), so a crash never leaves a half file.
  TokenFileWriter(const std::string& path, uint32_t vocab_size);
  ~TokenFileWriter();  // removes the temporary file unless finish() renamed it
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;
  void append(const std::vector<int32_t>& tokens);
  void finish();
  int64_t tokens_written() const { return count_; }

 private:
  std::string path_;
  std::ofstream out_;
  int64_t count_ = 0;
  bool finished_ = false;
};

class TokenFileReader {
 public:
  // Validates the header and size; throws InputError naming the file.
  explicit TokenFileReader(const std::string& path);
  int64_t size() const { return n_tokens_; }
  uint32_t vocab_size() const { return vocab_size_; }
  // Reads tokens [offset, offset + count) clipped to the file.
  std::vector<int32_t> read(int64_t offset, int64_t count);

 private:
  std::string path_;
  std::ifstream in_;
  int64_t n_tokens_ = 0;
  uint32_t vocab_size_ = 0;
};

}  // namespace ctitan::data
