// A .safetensors file (Hugging Face import): load_safetensors validates the header and every
// tensor's dtype, shape and byte range, then copies the data.
#include "ctitan/checkpoint/hf/safetensors.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = ctitan::fuzz::write_file("model.safetensors", ctitan::fuzz::as_text(data, size));
  ctitan::fuzz::expect_ctitan_errors_only([&] { (void)ctitan::checkpoint::hf::load_safetensors(path); },
                                          path.string());
  return 0;
}
