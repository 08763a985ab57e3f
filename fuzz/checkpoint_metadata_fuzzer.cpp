// A checkpoint's metadata.json: read_metadata (which parses each entry with entry_from_json),
// then what `checkpoint inspect` and the reader derive from each entry: its dtype and box text.
#include "ctitan/checkpoint/metadata.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = ctitan::fuzz::write_file("step-1/metadata.json", ctitan::fuzz::as_text(data, size));
  ctitan::fuzz::expect_ctitan_errors_only(
      [&] {
        auto m = ctitan::checkpoint::read_metadata(path.parent_path());
        for (const auto& e : m.entries) {
          (void)ctitan::checkpoint::entry_dtype(e.dtype, path.string());
          (void)ctitan::checkpoint::box_text(e.offsets, e.shape);
        }
      },
      path.string());
  return 0;
}
