#include "ctitan/data/byte_level.h"

#include <array>
#include <cstdint>

namespace ctitan::data {
namespace {

bool stands_for_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Alphabet {
  std::array<uint32_t, 256> code_point{};  // byte -> code point
  Alphabet() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) code_point[b] = stands_for_itself(b) ? uint32_t(b) : next++;
  }
  // Code points span U+0021..U+0143, so a table of 0x144 entries inverts the map; -1 = none.
  std::array<int, 0x144> byte_of() const {
    std::array<int, 0x144> inverse;
    inverse.fill(-1);
    for (int b = 0; b < 256; ++b) inverse[code_point[b]] = b;
    return inverse;
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else {  // every code point of the alphabet is below U+0800
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, alphabet().code_point[b]);
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  static const auto byte_of = alphabet().byte_of();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      cp = uint32_t(c & 0x1F) << 6 | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // longer sequences encode code points beyond the alphabet
    }
    if (cp >= byte_of.size() || byte_of[cp] < 0) return std::nullopt;
    out += char(byte_of[cp]);
  }
  return out;
}

}  // namespace ctitan::data
