#pragma once
// Writing a file so that a reader, or a crash, never sees half of it.
#include <filesystem>
#include <string>

namespace ctitan {

// Writes `path` atomically: `path.tmp`, fsync, rename, fsync of the directory. A crash leaves the
// old file or the new one, never a torn one; a failed write removes the temporary file. Throws
// IoError naming the file.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace ctitan
