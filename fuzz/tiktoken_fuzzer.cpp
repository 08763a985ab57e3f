// A tiktoken rank file (tokenizer.model): Tokenizer::load_tiktoken, then a short encode/decode
// round trip with whatever tokenizer it accepted.
#include "ctitan/data/tokenizer.h"
#include "fuzz_support.h"

namespace {
void use(const ctitan::data::Tokenizer& tok) {
  auto ids = tok.encode("Hello, world! 123 \xc3\xa9t\xc3\xa9 \n\n  x", true, true);
  (void)tok.decode(ids);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = ctitan::fuzz::write_file("tokenizer.model", ctitan::fuzz::as_text(data, size));
  ctitan::fuzz::expect_ctitan_errors_only([&] { use(ctitan::data::Tokenizer::load_tiktoken(path.string())); },
                                          path.string());
  return 0;
}
