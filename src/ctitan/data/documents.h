#pragma once
// Which files a dataset path holds, in which format (data/dataset_format.h), and the readers of
// the line-based formats: text (strfile) and JSONL.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctitan/data/dataset_format.h"

namespace ctitan::data {

struct DatasetFile {
  std::filesystem::path path;
  const DatasetFormat* format;  // an entry of dataset_formats()
};

// `format` is auto or a registry name. With auto, a file's extension decides (format_by_extension);
// other files in a directory (such as fortune's .dat indexes) are skipped; with a format named,
// every file is read in it. `path` is a file, a directory (walked recursively in sorted order,
// hidden entries such as .git skipped) or a glob over file names (`shards/*.parquet`:
// `*`, `?` and `[...]` in the last component). Throws InputError naming `key` for a missing path,
// no usable files, a format this build cannot read, or a mix of token and document files.
std::vector<DatasetFile> list_dataset_files(const std::string& path, const std::string& format,
                                            const std::string& key);

// The documents of `file` in its format; InputError for token files (they hold no documents).
std::unique_ptr<DocumentReader> open_documents(const DatasetFile& file, const DocumentOptions& options = {});

// Every document of one file (tokenizer training needs them all at once).
std::vector<std::string> read_documents(const DatasetFile& file, const DocumentOptions& options = {});

// Text files split at lines that are exactly "%" (the strfile format of fortune); otherwise a
// file is one document. Text may be compressed (.txt.gz, .txt.zst) and streams.
std::unique_ptr<DocumentReader> open_text_documents(const std::filesystem::path& file, const DocumentOptions&);
// JSONL lines are objects with a string field named options.text_column; a bad line is an
// InputError naming file and line. May be compressed (.jsonl.gz, .jsonl.zst).
std::unique_ptr<DocumentReader> open_jsonl_documents(const std::filesystem::path& file, const DocumentOptions& options);

}  // namespace ctitan::data
