#pragma once
// Writing a JSON document to a file so that a reader never sees half of it.
#include <filesystem>
#include <nlohmann/json.hpp>

namespace ctitan {

// Writes `j` indented by 2, UTF-8 as is, with a final newline, to `path.tmp`, then renames it to
// `path`: a crash leaves the old file or the new one, never a cut one. Throws IoError naming the
// file that could not be written or renamed.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& j);

}  // namespace ctitan
