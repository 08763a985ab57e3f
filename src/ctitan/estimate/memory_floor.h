#pragma once
// The least memory one rank needs for a training step, in double precision, so that sizes of any
// magnitude neither overflow nor reach the allocator: checked before a model is built or a step
// walked. A lower bound whatever the layout: every parameter sharded over every rank of a stage's
// data-parallel, tensor-parallel and pipeline dimensions, and only the largest activation of one
// microbatch (the logits or the FFN's hidden, (B, T, max(vocab, hidden)) over tp, 2 bytes each;
// B is 1 under PP, whose microbatches may be single sequences).
#include <string>

#include "ctitan/estimate/job_estimate.h"

namespace ctitan::estimate {

struct MemoryFloor {
  double parameters = 0;    // the whole model's
  double state_bytes = 0;   // fp32 weights, gradients and AdamW's two moments: 16 B per parameter, over the ranks
  double largest_activation_bytes = 0;
  double total() const { return state_bytes + largest_activation_bytes; }
};

MemoryFloor memory_floor(const JobShape& job);

// A ConfigError when `floor` exceeds `memory_bytes` (`memory` says whose: "this rank's share of
// the machine's memory"), naming the sizes to lower.
void refuse_beyond_memory(const MemoryFloor& floor, double memory_bytes, const std::string& memory);

// The estimate's walks count bytes in 64-bit integers: jobs that would hold more than 2^60 bytes
// unsharded are refused with a ConfigError before any walk.
void refuse_beyond_the_walk(const JobShape& job);

}  // namespace ctitan::estimate
