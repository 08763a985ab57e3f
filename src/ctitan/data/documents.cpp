#include "ctitan/data/documents.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "ctitan/common/error.h"
#include "ctitan/common/path_text.h"

namespace ctitan::data {
namespace fs = std::filesystem;
namespace {

std::optional<FileFormat> format_of(const fs::path& file, const std::string& requested) {
  if (requested == "text") return FileFormat::kText;
  if (requested == "jsonl") return FileFormat::kJsonl;
  if (requested == "tokens") return FileFormat::kTokens;
  auto ext = file.extension().string();
  if (ext == ".jsonl") return FileFormat::kJsonl;
  if (ext == ".bin" || ext == ".tokens") return FileFormat::kTokens;
  if (ext.empty() || ext == ".txt" || ext == ".md") return FileFormat::kText;
  return std::nullopt;
}

std::vector<std::string> split_strfile(std::istream& in) {
  std::vector<std::string> docs;
  std::string current;
  for (std::string line; std::getline(in, line);) {
    if (line == "%") {
      docs.push_back(std::move(current));
      current.clear();
    } else {
      current += line;
      current += '\n';
    }
  }
  docs.push_back(std::move(current));
  return docs;
}

std::vector<std::string> read_jsonl(std::istream& in, const fs::path& path) {
  std::vector<std::string> docs;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object() || !json.contains("text") || !json["text"].is_string()) {
      throw InputError(fmt::format("dataset error: {}:{}: expected a JSON object with a string \"text\" field",
                                   path.string(), line_no));
    }
    docs.push_back(json["text"].get<std::string>());
  }
  return docs;
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
  } else {
    candidates.push_back(path);
  }
  std::vector<std::pair<fs::path, FileFormat>> files;
  bool has_tokens = false, has_text = false;
  for (const auto& file : candidates) {
    auto f = format_of(file, format);
    if (!f) continue;
    (*f == FileFormat::kTokens ? has_tokens : has_text) = true;
    files.emplace_back(file, *f);
  }
  if (files.empty()) {
    throw InputError(fmt::format("dataset error: {} '{}' holds no usable files (.txt, .md, .jsonl, .bin or "
                                 "no extension)", key, path));
  }
  if (has_tokens && has_text) {
    throw InputError(fmt::format("dataset error: {} '{}' mixes token files and text files", key, path));
  }
  return files;
}

std::vector<std::string> read_documents(const fs::path& file, FileFormat format) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(fmt::format("dataset error: cannot read {}", file.string()));
  return format == FileFormat::kJsonl ? read_jsonl(in, file) : split_strfile(in);
}

}  // namespace ctitan::data
