#pragma once
// A tiny, fast training job for tests: a 2-layer model on a token file whose sequence is a
// fixed cycle, so that the next token is fully predictable and the loss can approach zero.
#include <string>
#include <vector>

#include "ctitan/config/job_config.h"

namespace ctitan::testing {

// Writes `n_tokens` tokens cycling through 0 .. period-1 to `path` (a ctitan token file).
void write_cyclic_token_file(const std::string& path, int n_tokens, int period, int vocab_size);

// dim 64, 2 layers, 4 heads, vocab 32, seq 32, batch 4, fp32, lr 3e-3, no warmup decay surprises,
// peak_flops and the link bandwidth fixed (no GEMM probe, no 64 MiB all-gather at start-up),
// metrics in `dump_folder`. Data: a cyclic token file in dump_folder.
config::JobConfig tiny_job_config(const std::string& dump_folder);

// The same job as command-line words for `ctitan train` (no TOML file needed).
std::vector<std::string> tiny_job_args(const std::string& dump_folder);

}  // namespace ctitan::testing
