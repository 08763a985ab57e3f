#pragma once
// Writing a file (a JSON document, a page) so that a reader never sees half of it.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace ctitan {

// Writes `j` indented by 2, UTF-8 as is, with a final newline, to `path.tmp`, then renames it to
// `path`: a crash leaves the old file or the new one, never a cut one. Throws IoError naming the
// file that could not be written or renamed.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& j);

// `contents` to `path.tmp`, then renamed to `path`; the temporary file is removed when the write
// fails. Throws IoError naming the file.
void write_file_atomically(const std::filesystem::path& path, const std::string& contents);

}  // namespace ctitan
