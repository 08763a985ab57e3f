#pragma once
// Head-tail load balancing for causal context parallelism (torchtitan's, from PyTorch's
// context_parallel): a sequence of T tokens is cut into 2 x cp chunks of T / (2 cp), and cp rank r
// holds chunks r and 2cp-1-r, in that order. Under a causal mask a late chunk attends to more keys
// than an early one; pairing the r-th earliest with the r-th latest gives every rank the same work.
#include <torch/torch.h>

namespace ctitan::parallel::cp {

// The positions in the sequence of cp rank `rank`'s T / cp tokens, (T / cp,) int64 on the CPU.
// T must be divisible by 2 cp (the config says so first: config_checks).
torch::Tensor shard_positions(int64_t T, int64_t rank, int64_t cp);

// x: (B, T, ...) -> (B, T / cp, ...), rank `rank`'s two chunks along dim 1, contiguous.
torch::Tensor shard_sequence(const torch::Tensor& x, int64_t rank, int64_t cp);

// The inverse over every rank's shard, in rank order: (B, T / cp, ...) x cp -> (B, T, ...).
torch::Tensor unshard_sequence(const std::vector<torch::Tensor>& shards);

// Which of rank `rank`'s query rows attend to which rows of rank `source`'s keys under the causal
// mask, in this layout (`chunk` = T / (2 cp)):
// Rank r holds chunks r (head) and 2cp-1-r (tail) of the sequence; the keys of rank j hold chunks
// j and 2cp-1-j. j == r: the local causal block; j < r: every query sees j's head chunk, never its
// tail (2cp-1-j > 2cp-1-r); j > r: only the tail queries see anything, and they see both of j's
// chunks. Each step but the local one is therefore one unmasked block of half the local work.
struct BlockPlan {
  torch::indexing::Slice q_rows, k_rows;  // along the token dimension of this rank's T / cp rows
  bool causal = false;
};
BlockPlan plan_block(int64_t rank, int64_t source, int64_t chunk);

}  // namespace ctitan::parallel::cp
