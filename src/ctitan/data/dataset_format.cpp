#include "ctitan/data/dataset_format.h"

#include "ctitan/data/byte_source.h"
#include "ctitan/data/documents.h"
#include "ctitan/data/parquet_documents.h"

namespace ctitan::data {

int64_t DocumentReader::skip(int64_t n) {
  int64_t skipped = 0;
  while (skipped < n && next()) ++skipped;
  return skipped;
}

const std::vector<DatasetFormat>& dataset_formats() {
  static const std::vector<DatasetFormat> formats = {
      {"text", {".txt", ".md", ""}, /*compressible=*/true, /*tokens=*/false, open_text_documents, ""},
      {"jsonl", {".jsonl"}, /*compressible=*/true, /*tokens=*/false, open_jsonl_documents, ""},
      {"tokens", {".bin", ".tokens"}, /*compressible=*/false, /*tokens=*/true, nullptr, ""},
      {"parquet", {".parquet"}, /*compressible=*/false, /*tokens=*/false, open_parquet_documents,
       parquet_unavailable_reason()},
  };
  return formats;
}

const DatasetFormat* find_dataset_format(std::string_view name) {
  for (const auto& format : dataset_formats()) {
    if (format.name == name) return &format;
  }
  return nullptr;
}

const DatasetFormat* format_by_extension(const std::filesystem::path& file) {
  // `corpus.jsonl.zst` holds JSONL: the name inside the compression decides.
  const auto ext = without_compression_suffix(file).extension().string();
  for (const auto& format : dataset_formats()) {
    for (const auto& e : format.extensions) {
      if (e == ext) return &format;
    }
  }
  return nullptr;
}

std::vector<std::string> dataset_format_names() {
  std::vector<std::string> names;
  for (const auto& format : dataset_formats()) names.push_back(format.name);
  return names;
}

std::string known_extensions() {
  std::string out;
  for (const auto& format : dataset_formats()) {
    for (const auto& e : format.extensions) {
      if (!out.empty()) out += ", ";
      out += e.empty() ? "no extension" : e;
    }
  }
  return out;
}

}  // namespace ctitan::data
