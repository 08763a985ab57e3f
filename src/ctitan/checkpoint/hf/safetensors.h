#pragma once
// The safetensors file format, read and written without the Python library:
//   [8 bytes: little-endian u64 N][N bytes: JSON header][data]
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end)} with
// offsets relative to the start of the data section, plus an optional "__metadata__" object of
// string values. Every read is validated; a bad file is an InputError naming it.
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ctitan::checkpoint::hf {

using NamedTensors = std::map<std::string, torch::Tensor>;

// The safetensors dtype code of `dtype` ("F32", "BF16", ...); throws InputError if it has none.
std::string safetensors_dtype(torch::ScalarType dtype);

// Writes `tensors` (in name order) and `metadata` to `path`. The file appears whole or not at
// all: it is written beside `path` and renamed over it.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Bytes the tensors would take in a safetensors data section (what sharding budgets).
int64_t tensor_bytes(const torch::Tensor& t);

struct SafetensorsFile {
  NamedTensors tensors;                          // CPU, contiguous, in the stored dtype
  std::map<std::string, std::string> metadata;   // the header's __metadata__
};

// Reads and validates a whole file: truncated file, bad header JSON, unknown dtype, a shape whose
// byte size overflows, offsets out of range or not matching the shape, tensors that overlap or
// leave bytes of the data section unowned each throw InputError("safetensors <path>: ...").
SafetensorsFile load_safetensors(const std::filesystem::path& path);

}  // namespace ctitan::checkpoint::hf
