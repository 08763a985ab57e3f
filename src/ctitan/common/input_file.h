#pragma once
// Files a user names as input (a config, a tokenizer) are read whole, so they must be regular files
// of a sane size: /dev/zero or /dev/urandom would grow memory until the OOM killer (ignoring
// SIGTERM meanwhile), and opening a FIFO blocks until a writer comes. Checked with stat(), which
// neither opens nor blocks.
#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>

#include <fmt/format.h>

namespace ctitan {

// Why `path` cannot be read as an input of at most `max_bytes`, or nullopt when it can (or when it
// does not exist: the caller's open says so in its own words).
inline std::optional<std::string> unreadable_input_reason(const std::string& path, int64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (S_ISDIR(st.st_mode)) return std::string("is a directory");
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISCHR(st.st_mode)    ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a file";
    return fmt::format("is not a regular file ({})", kind);
  }
  if (int64_t(st.st_size) > max_bytes) {
    return fmt::format("is {} bytes, more than the {} MiB such a file may be", int64_t(st.st_size), max_bytes >> 20);
  }
  return std::nullopt;
}

}  // namespace ctitan
