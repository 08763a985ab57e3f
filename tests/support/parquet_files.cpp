#include "support/parquet_files.h"

#include <gtest/gtest.h>

#include <sstream>

#include "ctitan/data/parquet_documents.h"
#include "support/test_support.h"

namespace ctitan::testing {

std::string parquet_skip_reason() {
  if (!data::parquet_unavailable_reason().empty()) return "Parquet is not compiled in (-DCTITAN_WITH_ARROW=OFF)";
  // Asked once per process: a build pointed at Arrow by CTITAN_ARROW_ROOT may have a Python without pyarrow.
  static const bool pyarrow = have_python() && run_python({"-c", "import pyarrow.parquet"}).exit_code == 0;
  if (!pyarrow) return "no Python with pyarrow (CTITAN_PYTHON, the venv) to write the Parquet files";
  return "";
}

std::vector<nlohmann::json> write_parquet_files(const nlohmann::json& specs, const std::filesystem::path& scratch_dir) {
  const auto spec_file = (scratch_dir / "parquet_spec.json").string();
  write_file(spec_file, specs.dump());
  auto result = run_python({source_dir() + "/tests/data/parquet_files.py", spec_file});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  std::vector<nlohmann::json> out;
  std::istringstream lines(result.output);
  for (std::string line; std::getline(lines, line);) {
    auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object()) out.push_back(row);
  }
  EXPECT_EQ(out.size(), specs.size()) << result.output;
  return out;
}

}  // namespace ctitan::testing
