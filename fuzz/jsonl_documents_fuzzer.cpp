// A dataset file: every document of it read as JSONL ({"text": ...} per line) and as text
// (strfile: documents split at "%" lines), as DocumentReader streams them.
#include "ctitan/data/documents.h"
#include "fuzz_support.h"

namespace {
void read_all(const std::filesystem::path& path, ctitan::data::FileFormat format) {
  ctitan::fuzz::expect_ctitan_errors_only(
      [&] {
        ctitan::data::DocumentReader reader(path, format);
        while (reader.next()) {
        }
      },
      path.string());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = ctitan::fuzz::write_file("docs.jsonl", ctitan::fuzz::as_text(data, size));
  read_all(path, ctitan::data::FileFormat::kJsonl);
  read_all(path, ctitan::data::FileFormat::kText);
  return 0;
}
