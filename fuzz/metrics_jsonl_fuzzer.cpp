// metrics.jsonl of a run being resumed: prepare_metrics_file keeps the rows up to the resumed
// step. The first input byte is the resumed step (0-255), the rest is the file.
#include "ctitan/metrics/metrics_logger.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t resumed_step = data[0];
  auto path = ctitan::fuzz::write_file("metrics.jsonl", ctitan::fuzz::as_text(data + 1, size - 1));
  ctitan::fuzz::expect_ctitan_errors_only([&] { ctitan::metrics::prepare_metrics_file(path.string(), resumed_step); },
                                          path.string());
  return 0;
}
