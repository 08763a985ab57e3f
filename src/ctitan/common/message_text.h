#pragma once
// Untrusted text quoted in an error message (a key, a token, a tensor name, an override word):
// the message must stay one line, so control characters are written as escapes.
#include <cstdio>
#include <string>
#include <string_view>

namespace ctitan {

// `text` with '\n', '\r', '\t' as "\n", "\r", "\t" and other control bytes as "\xNN";
// everything else (UTF-8 included) as is.
inline std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char escaped[5];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    } else {
      out += char(c);
    }
  }
  return out;
}

// The first line of `text` (all of it when it has no newline): an upstream exception's message
// often carries a backtrace after its first line.
inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace ctitan
