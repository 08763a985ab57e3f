#pragma once
// FNV-1a 64: a fingerprint stable across processes, builds and machines, unlike std::hash. For
// telling apart configs, tokenizers and RPC registries, not for security.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace ctitan {

class Fnv1a64 {
 public:
  static constexpr uint64_t kOffsetBasis = 14695981039346656037ull;
  // `offset`: the starting value; FNV's own unless a stored format began with another.
  explicit Fnv1a64(uint64_t offset = kOffsetBasis) : hash_(offset) {}
  Fnv1a64& add(std::string_view bytes) {
    for (unsigned char c : bytes) mix(c);
    return *this;
  }
  // A field of a record: its length first, so that ("ab", "c") and ("a", "bc") differ.
  Fnv1a64& add_field(std::string_view bytes) { return add_integer(int64_t(bytes.size())).add(bytes); }
  // Little-endian whatever the host's order.
  Fnv1a64& add_integer(int64_t v) {
    for (int i = 0; i < 8; ++i) mix(uint8_t(uint64_t(v) >> (8 * i)));
    return *this;
  }
  uint64_t value() const { return hash_; }
  std::string hex() const { return fmt::format("{:016x}", hash_); }  // 16 hex digits

 private:
  void mix(uint8_t c) { hash_ = (hash_ ^ c) * 1099511628211ull; }
  uint64_t hash_;
};

}  // namespace ctitan
