// A ctitan token file (.bin): TokenFileReader validates the header and size, then every token is
// read in windows as the packed loader does.
#include "ctitan/data/token_file.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = ctitan::fuzz::write_file("tokens.bin", ctitan::fuzz::as_text(data, size));
  ctitan::fuzz::expect_ctitan_errors_only(
      [&] {
        ctitan::data::TokenFileReader reader(path.string());
        for (int64_t offset = 0; offset < reader.size(); offset += 7) (void)reader.read(offset, 9);
        (void)reader.read(reader.size(), 4);  // past the end: clipped to nothing
      },
      path.string());
  return 0;
}
