// The build without Arrow (-DCTITAN_WITH_ARROW=OFF): Parquet is a known format that says it is
// not compiled in, rather than an unknown extension.
#include "ctitan/data/parquet_documents.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"

namespace ctitan::data {

std::string parquet_unavailable_reason() {
  return "Parquet is not compiled into this build of ctitan (built with -DCTITAN_WITH_ARROW=OFF); "
         "rebuild with pyarrow in the venv, or convert the data with a build that has it";
}

std::unique_ptr<DocumentReader> open_parquet_documents(const std::filesystem::path& file, const DocumentOptions&) {
  throw InputError(fmt::format("dataset error: {}: {}", file.string(), parquet_unavailable_reason()));
}

}  // namespace ctitan::data
