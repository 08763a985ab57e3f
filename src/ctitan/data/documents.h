#pragma once
// Which files a dataset path holds, in which format, and how a file splits into documents.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/data/byte_source.h"

namespace ctitan::data {

enum class FileFormat { kText, kJsonl, kTokens };

// `format` is auto | text | jsonl | tokens. With auto, a file's extension decides: .jsonl is
// JSONL, .bin/.tokens is a token file, .txt/.md or no extension is text; other files in a
// directory (such as fortune's .dat indexes) are skipped. Text and JSONL may be compressed,
// `.jsonl.gz`, `.jsonl.zst`, `.txt.gz`..., and stream without being decompressed to disk. Directories are walked recursively in
// sorted order. Throws InputError naming `key` for a missing path, no usable files, or a mix of
// token and text files.
std::vector<std::pair<std::filesystem::path, FileFormat>> list_dataset_files(const std::string& path,
                                                                              const std::string& format,
                                                                              const std::string& key);

// The documents of one text or JSONL file, one at a time: only the current document is held.
// Text files split at lines that are exactly "%" (the strfile format of fortune); otherwise a
// file is one document. JSONL lines are objects with a string "text" field; a bad line is an
// InputError naming file and line.
class DocumentReader {
 public:
  DocumentReader(const std::filesystem::path& file, FileFormat format);
  // The next document, or nullopt after the last.
  std::optional<std::string> next();

 private:
  std::optional<std::string> next_jsonl();
  std::optional<std::string> next_strfile();

  std::filesystem::path file_;
  FileFormat format_;
  LineReader lines_;
  std::string line_;
  int64_t line_no_ = 0;
  bool done_ = false;
};

// Every document of one file (tokenizer training needs them all at once).
std::vector<std::string> read_documents(const std::filesystem::path& file, FileFormat format);

}  // namespace ctitan::data
