#pragma once
// base64_encode, base64_decode: standard padded base64 (RFC 4648 §4), the encoding tiktoken rank
// files use for token bytes.
#include <optional>
#include <string>
#include <string_view>

namespace ctitan::data {

std::string base64_encode(std::string_view bytes);

// Returns nullopt unless `text` is canonical padded base64: length a multiple of 4, only the
// standard alphabet, '=' only as final padding, and zero unused bits in the last group. Canonical
// is what every encoder writes, so anything else in a rank file means the file is damaged.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace ctitan::data
