#pragma once
// How error messages name a path from a config or flag: a relative path says which directory it
// was resolved against, so "does not exist" is never a guess about the working directory.
#include <filesystem>
#include <string>

namespace ctitan {

// " (relative to /home/me/run)" for a relative path; "" for an absolute or empty one.
inline std::string relative_path_note(const std::string& path) {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return "";
  std::error_code ec;
  auto cwd = std::filesystem::current_path(ec);
  return " (relative to " + (ec ? std::string("the working directory") : cwd.string()) + ")";
}

}  // namespace ctitan
