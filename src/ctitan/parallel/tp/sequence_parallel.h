#pragma once
// The autograd-aware collectives of Megatron-style tensor parallelism with sequence parallel, on
// the tp group. Between blocks the activations are split on the sequence (dim 1); attention and
// the feed-forward need the whole sequence, and their row-wise outputs are partial sums:
//
//   x (B, T/tp, D) --gather_sequence--> (B, T, D) --column-wise--> local heads / hidden
//                   --row-wise--> partial (B, T, D) --reduce_scatter_sequence--> (B, T/tp, D)
//
// Each backward is the other collective: a full-sequence input's gradient is a partial sum over
// the tp ranks (each has the gradient through its own heads), so it is reduce-scattered; a
// reduce-scattered output's gradient is needed on the whole sequence, so it is all-gathered.
// Every call is synchronous: its buffers live only inside the call (nothing to hold until a
// wait()), and every tp rank issues the same collectives in the same order because the model
// runs the same code on each.
#include <torch/torch.h>

#include "ctitan/distributed/communicator.h"

namespace ctitan::parallel::tp {

// x: (B, T/tp, ...) -> (B, T, ...), rank r's rows at [r*T/tp, (r+1)*T/tp).
torch::Tensor gather_sequence(const torch::Tensor& x, distributed::Communicator& group);

// x: (B, T, ...) partial sums -> (B, T/tp, ...): the sum over the group of this rank's rows.
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, distributed::Communicator& group);

// Logits sharded on the vocabulary, rank r holding columns [r*shard, r*shard + x.size(-1)) of
// `vocab` (the last rank may hold fewer, or none): x (..., V_r) -> (..., vocab), the whole
// logits on every rank. The loss computed from them is the same on every tp rank, so the
// backward is this rank's columns of the gradient, with no communication.
torch::Tensor gather_vocab(const torch::Tensor& x, distributed::Communicator& group, int64_t vocab, int64_t shard);

}  // namespace ctitan::parallel::tp
