#pragma once
// Ring attention over a context-parallel group (torchtitan's CP, "allgather"-free rotation): each
// rank holds its load-balanced two chunks of the sequence (load_balance.h); keys and values travel
// around the ring, one hop per step, while the rank computes the block attention of the pair it
// holds; the blocks' partial outputs are merged with their log-sum-exps in fp32. Backward travels
// the ring again with the keys and values, and with each rank's key/value gradients, which arrive
// home after the last hop. The result equals causal attention over the whole sequence.
#include <torch/torch.h>

#include "ctitan/distributed/communicator.h"

namespace ctitan::parallel::cp {

// What one rank's ring attention spends waiting for the ring (host seconds blocked in wait()).
struct RingTimes {
  double exposed_seconds = 0;
};

// q: (B, Tl, H, D), k, v: (B, Tl, H_kv, D), H % H_kv == 0, Tl = T / cp: this rank's chunks r and
// 2cp-1-r of the sequence. Returns (B, Tl, H * D), the rows of causal attention over the whole
// sequence for this rank's queries, in q's dtype; differentiable in q, k and v. Every rank of
// `group` calls it together. `times`, when given, accumulates the waits.
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const std::shared_ptr<distributed::Communicator>& group, RingTimes* times = nullptr);

}  // namespace ctitan::parallel::cp
