#pragma once
// Random tokens for throughput benchmarks: throughput does not depend on the data.
#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ctitan/data/token_file.h"

namespace ctitan::bench {

// `n_tokens` uniform ids below `vocab` in a ctitan token file under `dir`; returns its path.
inline std::string write_random_tokens(const std::filesystem::path& dir, int64_t vocab, int64_t n_tokens) {
  auto path = (dir / fmt::format("random_{}.bin", vocab)).string();
  data::TokenFileWriter writer(path, uint32_t(vocab));
  auto tokens = torch::randint(0, vocab, {n_tokens}, torch::kInt);
  writer.append(std::vector<int32_t>(tokens.data_ptr<int32_t>(), tokens.data_ptr<int32_t>() + n_tokens));
  writer.finish();
  return path;
}

}  // namespace ctitan::bench
