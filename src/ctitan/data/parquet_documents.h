#pragma once
// Parquet datasets (FineWeb, The Stack, most of the Hugging Face hub): one document per row of a
// string column, read with Apache Arrow's C++ Parquet reader (cmake/FindArrowFromPython.cmake).
// A build with -DCTITAN_WITH_ARROW=OFF has the same functions, which refuse with one line.
#include <filesystem>
#include <memory>
#include <string>

#include "ctitan/data/dataset_format.h"

namespace ctitan::data {

// Streams the column options.text_column page by page (a bounded buffer, whatever the size of
// the file or its row groups); compressions are Arrow's (snappy, zstd, gzip, lz4, brotli, none).
// A null row is an empty document. skip() passes whole row groups by their metadata. A file that
// is not Parquet, a missing column, a column that is not a string: InputError naming the file.
std::unique_ptr<DocumentReader> open_parquet_documents(const std::filesystem::path& file,
                                                       const DocumentOptions& options);

// Empty when Parquet is compiled in; otherwise the one line that says it is not.
std::string parquet_unavailable_reason();

}  // namespace ctitan::data
