// A Hugging Face tokenizer.json (alone in its directory: no tokenizer_config.json beside it):
// load_hf_tokenizer_json, then a short encode/decode round trip with what it accepted.
#include "ctitan/data/hf_tokenizer_json.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = ctitan::fuzz::write_file("tokenizer.json", ctitan::fuzz::as_text(data, size));
  ctitan::fuzz::expect_ctitan_errors_only(
      [&] {
        auto tok = ctitan::data::load_hf_tokenizer_json(path);
        auto ids = tok.encode("Hello, world! 123 \xc3\xa9t\xc3\xa9 \n\n  x", true, true);
        (void)tok.decode(ids);
      },
      path.string());
  return 0;
}
