#pragma once
// How keys and values reach every rank of a context-parallel group, and how their gradients get
// back (torchtitan's context_parallel_rotate_method):
//   alltoall  - a ring: each step passes the keys held to the next rank, one hop per step, while
//               the step computes (PyTorch rotates with all_to_all_single; ctitan with isend/irecv,
//               which is the same exchange); in backward the gradients travel one hop behind the
//               keys, summed on the way, and reach their owner after cp - 1 hops.
//   allgather - one all-gather of every rank's keys before the steps (overlapping the local
//               block), and in backward one reduce-scatter of the gradients after them.
// Both move (cp - 1) x a rank's keys and values per pass (forward, and backward again), and in
// backward (cp - 1) x their gradients in fp32. The ring holds two key buffers and two gradient
// buffers at a time; the all-gather cp copies of the keys, and in backward cp fp32 gradients.
#include <torch/torch.h>

#include <memory>

#include "ctitan/config/job_config.h"
#include "ctitan/distributed/communicator.h"

namespace ctitan::parallel::cp {

// What one rank spends waiting for the rotation (host seconds blocked in wait()).
struct RingTimes {
  double exposed_seconds = 0;
};

// One rotation, for one forward or one backward pass. Steps run 0 .. cp-1 in order; step s holds
// the keys of rank (rank - s) mod cp, step 0 this rank's own.
class KvRotation {
 public:
  virtual ~KvRotation() = default;
  // Step `step`'s keys and values, (2, B, Tl, H_kv, D). Called once per step, in order.
  virtual torch::Tensor keys(int64_t step) = 0;
  // Adds step `step`'s gradient of those keys and values (fp32, same shape), after keys(step).
  virtual void add_grad(int64_t step, const torch::Tensor& grad) = 0;
  // After the last add_grad: the gradient of this rank's own keys and values, summed over every
  // rank's queries (fp32).
  virtual torch::Tensor own_grad() = 0;
};

// `local`: this rank's keys and values, (2, B, Tl, H_kv, D), contiguous.
std::unique_ptr<KvRotation> make_rotation(config::CpRotateMethod method, distributed::Communicator& group,
                                          torch::Tensor local, RingTimes* times);

}  // namespace ctitan::parallel::cp
