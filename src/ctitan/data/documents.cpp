#include "ctitan/data/documents.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "ctitan/common/error.h"
#include "ctitan/common/path_text.h"

namespace ctitan::data {
namespace fs = std::filesystem;
namespace {

std::optional<FileFormat> format_of(const fs::path& file, const std::string& requested) {
  if (requested == "text") return FileFormat::kText;
  if (requested == "jsonl") return FileFormat::kJsonl;
  if (requested == "tokens") return FileFormat::kTokens;
  // `corpus.jsonl.zst` holds JSONL: the name inside the compression decides.
  auto ext = without_compression_suffix(file).extension().string();
  if (ext == ".jsonl") return FileFormat::kJsonl;
  if (ext == ".bin" || ext == ".tokens") return FileFormat::kTokens;
  if (ext.empty() || ext == ".txt" || ext == ".md") return FileFormat::kText;
  return std::nullopt;
}

}  // namespace

std::vector<std::pair<fs::path, FileFormat>> list_dataset_files(const std::string& path, const std::string& format,
                                                                 const std::string& key) {
  if (path.empty()) throw InputError(fmt::format("dataset error: {} is not set", key));
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(fmt::format("dataset error: {} '{}'{} does not exist", key, path, relative_path_note(path)));
  std::vector<fs::path> candidates;
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::recursive_directory_iterator(path)) {
      if (entry.is_regular_file()) candidates.push_back(entry.path());
    }
    std::sort(candidates.begin(), candidates.end());
  } else if (fs::is_regular_file(path)) {
    candidates.push_back(path);
  } else {  // /dev/zero, a FIFO, a socket: nothing that ends, or that can be read again on resume
    throw InputError(fmt::format("dataset error: {} '{}' is neither a regular file nor a directory", key, path));
  }
  std::vector<std::pair<fs::path, FileFormat>> files;
  bool has_tokens = false, has_text = false;
  for (const auto& file : candidates) {
    auto f = format_of(file, format);
    if (!f) continue;
    if (*f == FileFormat::kTokens && compression_of(file) != Compression::kNone) {
      throw InputError(fmt::format("dataset error: {}: token files are read in place and cannot be compressed",
                                   file.string()));
    }
    (*f == FileFormat::kTokens ? has_tokens : has_text) = true;
    files.emplace_back(file, *f);
  }
  if (files.empty()) {
    throw InputError(fmt::format("dataset error: {} '{}' holds no usable files (.txt, .md, .jsonl, "
                                 "optionally .gz/.zst, .bin or no extension)", key, path));
  }
  if (has_tokens && has_text) {
    throw InputError(fmt::format("dataset error: {} '{}' mixes token files and text files", key, path));
  }
  return files;
}

DocumentReader::DocumentReader(const fs::path& file, FileFormat format)
    : file_(file), format_(format), lines_(file) {}

std::optional<std::string> DocumentReader::next() {
  if (done_) return std::nullopt;
  return format_ == FileFormat::kJsonl ? next_jsonl() : next_strfile();
}

std::optional<std::string> DocumentReader::next_jsonl() {
  while (lines_.next(line_)) {
    ++line_no_;
    if (line_.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto json = nlohmann::json::parse(line_, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object() || !json.contains("text") || !json["text"].is_string()) {
      throw InputError(fmt::format("dataset error: {}:{}: expected a JSON object with a string \"text\" field",
                                   file_.string(), line_no_));
    }
    return std::move(json["text"].get_ref<std::string&>());
  }
  done_ = true;
  return std::nullopt;
}

// A document ends at a line that is exactly "%", and the last one at the end of the file (even
// when empty, as fortune's files end with "%").
std::optional<std::string> DocumentReader::next_strfile() {
  std::string doc;
  while (lines_.next(line_)) {
    if (line_ == "%") return doc;
    doc += line_;
    doc += '\n';
    if (doc.size() > LineReader::kMaxLineBytes) {
      throw InputError(fmt::format("dataset error: {}: a document longer than {} MiB (no \"%\" separator line)",
                                   lines_.file().string(), LineReader::kMaxLineBytes >> 20));
    }
  }
  done_ = true;
  return doc;
}

std::vector<std::string> read_documents(const fs::path& file, FileFormat format) {
  std::vector<std::string> docs;
  DocumentReader reader(file, format);
  while (auto doc = reader.next()) docs.push_back(std::move(*doc));
  return docs;
}

}  // namespace ctitan::data
