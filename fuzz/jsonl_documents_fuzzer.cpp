// A dataset file: every document of it read as JSONL ({"text": ...} per line) and as text
// (strfile: documents split at "%" lines), as the registry's readers stream them.
#include "ctitan/data/documents.h"
#include "fuzz_support.h"

namespace {
void read_all(const std::filesystem::path& path, const char* format) {
  ctitan::fuzz::expect_ctitan_errors_only(
      [&] {
        auto reader = ctitan::data::open_documents({path, ctitan::data::find_dataset_format(format)});
        while (reader->next()) {
        }
      },
      path.string());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = ctitan::fuzz::write_file("docs.jsonl", ctitan::fuzz::as_text(data, size));
  read_all(path, "jsonl");
  read_all(path, "text");
  return 0;
}
