#pragma once
// GPT-2's byte-level alphabet, which Hugging Face's tokenizer.json uses to spell token bytes as
// text: printable Latin-1 bytes stand for themselves, the other 68 bytes for the code points
// U+0100.. in byte order (so a space is written 'Ġ', U+0120).
#include <optional>
#include <string>
#include <string_view>

namespace ctitan::data {

// Token bytes -> their byte-level spelling (UTF-8).
std::string byte_level_encode(std::string_view bytes);

// The inverse; nullopt when `text` is not valid UTF-8 or holds a code point outside the alphabet.
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace ctitan::data
