#pragma once
// The checksum every saved slice carries: CRC-32 (zlib's, the polynomial of gzip and PNG), fed
// incrementally so a writer can checksum bytes on their way to disk.
#include <cstddef>
#include <cstdint>

namespace ctitan::checkpoint {

class Crc32 {
 public:
  void update(const void* data, size_t bytes);
  uint32_t value() const { return value_; }

 private:
  uint32_t value_ = 0;
};

uint32_t crc32(const void* data, size_t bytes);

}  // namespace ctitan::checkpoint
