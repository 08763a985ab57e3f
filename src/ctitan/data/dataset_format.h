#pragma once
// The dataset registry: one entry per file format, the only list of formats in ctitan. The
// config's choices (training.dataset, validation.dataset), the extensions `auto` recognises, and
// how a file is opened all come from here, so a new format is one entry.
//
// What every entry shares, and so is not an entry's field:
// - the split across data-parallel ranks: every rank reads the same stream and the loader deals
//   out its windows (data/packed_loader.h), whatever the format;
// - the saved position: for document formats, the index of the next document over the dataset's
//   files in sorted order (a Parquet row, null rows included); for token files, a token offset.
//   Resuming skips to it: DocumentReader::skip, which an indexed format (Parquet) does in place.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ctitan::data {

struct DocumentOptions {
  std::string text_column = "text";  // the JSONL field or Parquet column that holds the text
};

// The documents of one file, one at a time: only the current document (or a bounded buffer)
// is held, whatever the file's size.
class DocumentReader {
 public:
  virtual ~DocumentReader() = default;
  // The next document, or nullopt after the last. A null or empty document is "" (the loader
  // skips blank documents), so that positions count rows as they are on disk.
  virtual std::optional<std::string> next() = 0;
  // Passes over up to `n` documents; returns how many, fewer only at the end of the file.
  virtual int64_t skip(int64_t n);
};

struct DatasetFormat {
  std::string name;                     // the config's value: training.dataset = "<name>"
  std::vector<std::string> extensions;  // what `auto` recognises ("" = no extension)
  bool compressible = false;            // its files may be .gz/.zst (streamed, byte_source.h)
  bool tokens = false;                  // token ids on disk (token_file.h): no documents, no tokenizer
  // Opens one file's documents; empty for token formats.
  std::function<std::unique_ptr<DocumentReader>(const std::filesystem::path&, const DocumentOptions&)> open;
  // Non-empty when this build cannot read the format: the one line that says why.
  std::string unavailable;
};

const std::vector<DatasetFormat>& dataset_formats();
// nullptr for an unknown name.
const DatasetFormat* find_dataset_format(std::string_view name);
// The format `auto` gives `file` by its extension (the name inside any .gz/.zst), or nullptr.
const DatasetFormat* format_by_extension(const std::filesystem::path& file);
// The registry's names in order: "text", "jsonl", "tokens", "parquet".
std::vector<std::string> dataset_format_names();
// ".txt, .md, no extension, .jsonl, .bin, .tokens, .parquet": for error messages.
std::string known_extensions();

}  // namespace ctitan::data
