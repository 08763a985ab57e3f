#include "ctitan/checkpoint/checksum.h"

#include <zlib.h>

#include <algorithm>

namespace ctitan::checkpoint {

void Crc32::update(const void* data, size_t bytes) {
  // zlib takes a uInt length: feed at most 1 GiB per call.
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    size_t n = std::min<size_t>(bytes, size_t(1) << 30);
    value_ = uint32_t(::crc32(value_, p, uInt(n)));
    p += n;
    bytes -= n;
  }
}

uint32_t crc32(const void* data, size_t bytes) {
  Crc32 c;
  c.update(data, bytes);
  return c.value();
}

}  // namespace ctitan::checkpoint
