#pragma once
// Parquet files for tests, written by pyarrow (tests/data/parquet_files.py, which documents the
// spec): an independent writer, so ctitan's reader is checked against files as people have them.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ctitan::testing {

// Empty when the Parquet tests can run; otherwise the one line a skip prints (no venv Python, or
// a build without Arrow).
std::string parquet_skip_reason();

// Writes every file of `specs` (a JSON array) in one Python process; returns what pyarrow says
// of each (num_row_groups, num_rows, compression). A failure of the script fails the test.
std::vector<nlohmann::json> write_parquet_files(const nlohmann::json& specs, const std::filesystem::path& scratch_dir);

}  // namespace ctitan::testing
