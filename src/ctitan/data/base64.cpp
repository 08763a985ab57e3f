#include "ctitan/data/base64.h"

#include <array>
#include <cstdint>

namespace ctitan::data {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr int8_t kInvalid = -1;

// Character -> 6-bit value, kInvalid for anything outside the alphabet (including '=').
constexpr std::array<int8_t, 256> make_decode_table() {
  std::array<int8_t, 256> table{};
  for (auto& v : table) v = kInvalid;
  for (int i = 0; i < 64; ++i) table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kDecode = make_decode_table();

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t group = static_cast<uint8_t>(bytes[i]) << 16 |
                     static_cast<uint8_t>(bytes[i + 1]) << 8 | static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[group >> 18 & 63];
    out += kAlphabet[group >> 12 & 63];
    out += kAlphabet[group >> 6 & 63];
    out += kAlphabet[group & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t group = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) group |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[group >> 18 & 63];
    out += kAlphabet[group >> 12 & 63];
    out += rest == 2 ? kAlphabet[group >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;

  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    bool last = i + 4 == text.size();
    size_t n_chars = last ? 4 - padding : 4;  // 2..4 data characters in the group
    uint32_t group = 0;
    for (size_t k = 0; k < 4; ++k) {
      int8_t v = k < n_chars ? kDecode[static_cast<uint8_t>(text[i + k])] : 0;
      if (v == kInvalid) return std::nullopt;
      group = group << 6 | static_cast<uint32_t>(v);
    }
    // n data characters carry 6n bits of which 8*(n-1) are bytes; the rest must be zero.
    if (n_chars == 2 && (group & 0xFFFF) != 0) return std::nullopt;
    if (n_chars == 3 && (group & 0xFF) != 0) return std::nullopt;
    out += static_cast<char>(group >> 16);
    if (n_chars >= 3) out += static_cast<char>(group >> 8 & 0xFF);
    if (n_chars == 4) out += static_cast<char>(group & 0xFF);
  }
  return out;
}

}  // namespace ctitan::data
