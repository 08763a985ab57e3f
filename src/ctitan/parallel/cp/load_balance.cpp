#include "ctitan/parallel/cp/load_balance.h"

namespace ctitan::parallel::cp {
namespace {

// The first positions of rank `rank`'s two chunks, each `chunk` tokens long.
std::pair<int64_t, int64_t> chunk_starts(int64_t T, int64_t rank, int64_t cp) {
  TORCH_CHECK(cp >= 1 && rank >= 0 && rank < cp && T % (2 * cp) == 0, "context parallelism: sequence length ", T,
              " is not divisible by 2 x cp degree ", cp, " (or rank ", rank, " is outside the group)");
  const int64_t chunk = T / (2 * cp);
  return {rank * chunk, (2 * cp - 1 - rank) * chunk};
}

}  // namespace

torch::Tensor shard_positions(int64_t T, int64_t rank, int64_t cp) {
  auto [head, tail] = chunk_starts(T, rank, cp);
  const int64_t chunk = T / (2 * cp);
  return torch::cat({torch::arange(head, head + chunk, torch::kLong), torch::arange(tail, tail + chunk, torch::kLong)});
}

torch::Tensor shard_sequence(const torch::Tensor& x, int64_t rank, int64_t cp) {
  const int64_t T = x.size(1);
  auto [head, tail] = chunk_starts(T, rank, cp);
  const int64_t chunk = T / (2 * cp);
  return torch::cat({x.narrow(1, head, chunk), x.narrow(1, tail, chunk)}, 1);
}

BlockPlan plan_block(int64_t rank, int64_t source, int64_t chunk) {
  using torch::indexing::Slice;
  if (source == rank) return {Slice(), Slice(), true};
  if (source < rank) return {Slice(), Slice(0, chunk), false};
  return {Slice(chunk, torch::indexing::None), Slice(), false};
}

torch::Tensor unshard_sequence(const std::vector<torch::Tensor>& shards) {
  const int64_t cp = int64_t(shards.size());
  TORCH_CHECK(cp >= 1 && shards.front().size(1) % 2 == 0, "unshard_sequence: an even shard length per rank");
  const int64_t chunk = shards.front().size(1) / 2;
  // Chunk c of the sequence: rank c's head for c < cp, rank 2cp-1-c's tail after.
  std::vector<torch::Tensor> chunks(size_t(2 * cp));
  for (int64_t r = 0; r < cp; ++r) {
    chunks[size_t(r)] = shards[size_t(r)].narrow(1, 0, chunk);
    chunks[size_t(2 * cp - 1 - r)] = shards[size_t(r)].narrow(1, chunk, chunk);
  }
  return torch::cat(chunks, 1);
}

}  // namespace ctitan::parallel::cp
