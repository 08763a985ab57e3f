#include "ctitan/data/documents.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "ctitan/common/error.h"
#include "ctitan/common/path_text.h"
#include "ctitan/data/byte_source.h"

namespace ctitan::data {
namespace fs = std::filesystem;
namespace {

// A JSONL file: one document per non-blank line.
class JsonlDocumentReader : public DocumentReader {
 public:
  JsonlDocumentReader(const fs::path& file, std::string text_column)
      : file_(file), text_column_(std::move(text_column)), lines_(file) {}

  std::optional<std::string> next() override {
    while (lines_.next(line_)) {
      ++line_no_;
      if (line_.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto json = nlohmann::json::parse(line_, nullptr, /*allow_exceptions=*/false);
      if (json.is_discarded() || !json.is_object() || !json.contains(text_column_) ||
          !json[text_column_].is_string()) {
        throw InputError(fmt::format("dataset error: {}:{}: expected a JSON object with a string \"{}\" field",
                                     file_.string(), line_no_, text_column_));
      }
      return std::move(json[text_column_].get_ref<std::string&>());
    }
    return std::nullopt;
  }

 private:
  fs::path file_;
  std::string text_column_;
  LineReader lines_;
  std::string line_;
  int64_t line_no_ = 0;
};

// A strfile text: a document ends at a line that is exactly "%", and the last one at the end of
// the file (even when empty, as fortune's files end with "%").
class StrfileDocumentReader : public DocumentReader {
 public:
  explicit StrfileDocumentReader(const fs::path& file) : lines_(file) {}

  std::optional<std::string> next() override {
    if (done_) return std::nullopt;
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

 private:
  LineReader lines_;
  std::string line_;
  bool done_ = false;
};

bool is_glob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

// The regular files of a glob's last component, in its (existing) parent directory.
std::vector<fs::path> glob_files(const std::string& pattern, const std::string& key) {
  const fs::path p(pattern);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string name = p.filename().string();
  if (is_glob(dir.string())) {
    throw InputError(fmt::format("dataset error: {} '{}': only the last path component may hold * ? [", key, pattern));
  }
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InputError(fmt::format("dataset error: {} '{}': directory '{}'{} does not exist", key, pattern,
                                 dir.string(), relative_path_note(dir.string())));
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    // FNM_PERIOD: `*` does not match a leading dot, so hidden files stay out, as in directory walks.
    if (entry.is_regular_file() && fnmatch(name.c_str(), entry.path().filename().c_str(), FNM_PERIOD) == 0) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::unique_ptr<DocumentReader> open_text_documents(const fs::path& file, const DocumentOptions&) {
  return std::make_unique<StrfileDocumentReader>(file);
}

std::unique_ptr<DocumentReader> open_jsonl_documents(const fs::path& file, const DocumentOptions& options) {
  return std::make_unique<JsonlDocumentReader>(file, options.text_column);
}

std::vector<DatasetFile> list_dataset_files(const std::string& path, const std::string& format,
                                            const std::string& key) {
  if (path.empty()) throw InputError(fmt::format("dataset error: {} is not set", key));
  const DatasetFormat* requested = nullptr;
  if (format != "auto") {
    requested = find_dataset_format(format);
    if (!requested) {
      throw InputError(fmt::format("dataset error: {}: unknown dataset format '{}' (auto, {})", key, format,
                                   fmt::join(dataset_format_names(), ", ")));
    }
  }
  std::vector<fs::path> candidates;
  std::error_code ec;
  if (!fs::exists(path, ec) && is_glob(path)) {
    candidates = glob_files(path, key);
    if (candidates.empty()) throw InputError(fmt::format("dataset error: {} '{}' matches no files", key, path));
  } else if (!fs::exists(path, ec)) {
    throw InputError(fmt::format("dataset error: {} '{}'{} does not exist", key, path, relative_path_note(path)));
  } else if (fs::is_directory(path)) {
    // Hidden entries are not data: a clone of a Hugging Face dataset holds .git, .gitattributes
    // and .cache/ beside its shards.
    for (auto it = fs::recursive_directory_iterator(path); it != fs::recursive_directory_iterator(); ++it) {
      if (it->path().filename().string().front() == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) candidates.push_back(it->path());
    }
    std::sort(candidates.begin(), candidates.end());
  } else if (fs::is_regular_file(path)) {
    candidates.push_back(path);
  } else {  // /dev/zero, a FIFO, a socket: nothing that ends, or that can be read again on resume
    throw InputError(fmt::format("dataset error: {} '{}' is neither a regular file nor a directory", key, path));
  }
  std::vector<DatasetFile> files;
  bool has_tokens = false, has_documents = false;
  for (const auto& file : candidates) {
    const DatasetFormat* f = requested ? requested : format_by_extension(file);
    if (!f) continue;
    if (!f->unavailable.empty()) throw InputError(fmt::format("dataset error: {}: {}", file.string(), f->unavailable));
    if (!f->compressible && compression_of(file) != Compression::kNone) {
      throw InputError(fmt::format("dataset error: {}: {} files are read in place and cannot be compressed "
                                   "as a whole", file.string(), f->name));
    }
    (f->tokens ? has_tokens : has_documents) = true;
    files.push_back({file, f});
  }
  if (files.empty()) {
    std::vector<std::string> compressible;
    for (const auto& f : dataset_formats()) {
      if (f.compressible) compressible.push_back(f.name);
    }
    throw InputError(fmt::format("dataset error: {} '{}' holds no usable files ({}; {} optionally .gz/.zst)", key, path,
                                 known_extensions(), fmt::join(compressible, ", ")));
  }
  if (has_tokens && has_documents) {
    throw InputError(fmt::format("dataset error: {} '{}' mixes token files and text files", key, path));
  }
  return files;
}

std::unique_ptr<DocumentReader> open_documents(const DatasetFile& file, const DocumentOptions& options) {
  if (!file.format->open) {
    throw InputError(fmt::format("dataset error: {}: {} files hold token ids, not documents", file.path.string(),
                                 file.format->name));
  }
  return file.format->open(file.path, options);
}

std::vector<std::string> read_documents(const DatasetFile& file, const DocumentOptions& options) {
  std::vector<std::string> docs;
  auto reader = open_documents(file, options);
  while (auto doc = reader->next()) docs.push_back(std::move(*doc));
  return docs;
}

}  // namespace ctitan::data
