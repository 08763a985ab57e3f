#pragma once
// Expert parallelism applied to a built decoder from outside, as torchtitan's ExpertParallel:
// each rank of an ep group keeps experts [r E/ep, (r+1) E/ep) of every MoE layer (rows of
// moe.experts.w1/w2/w3), and a MoE layer's routed tokens travel to the rank holding their
// expert and back (ModuleHooks::experts):
//
//   counts (E) --all-to-all--> the counts every rank sends this rank, (ep, E/ep) [host copy: the splits]
//   routed rows, sorted by expert id (so one contiguous block per destination)
//     --all-to-all (uneven splits)--> rows from every rank, source-major
//     --permute to expert-major--> local experts (ops::grouped_matmul, through FSDP's hooks)
//     --inverse permutation, all-to-all back--> (N k, dim) in the routed order
//
// Backward sends the gradients the same ways in reverse. The router, the scores, the shared
// experts and the bias stay on every rank (FSDP shards them over dp_shard as the rest); FSDP
// shards each rank's experts over efsdp, the ranks of dp_shard holding the same experts.
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/models/common/transformer.h"

namespace ctitan::parallel::ep {

class ExpertParallel {
 public:
  // Slices every MoE layer's experts of `parts` (deferred or with values) and hooks their
  // dispatch on each part. The ep group's size must divide num_experts.
  ExpertParallel(const std::vector<models::TransformerImpl*>& parts, std::shared_ptr<distributed::Communicator> group);
  ExpertParallel(const ExpertParallel&) = delete;
  ExpertParallel& operator=(const ExpertParallel&) = delete;

  // Where each kept slice sits in its global (E, ...) tensor.
  const ShardLayouts& shard_layouts() const { return layouts_; }
  // Seconds the training thread waited on the all-to-alls, and the bytes this rank sent, since
  // the last call (forward and backward).
  double take_exposed_comm_seconds();
  int64_t take_sent_bytes();
  const distributed::Communicator& group() const { return *group_; }

  // The dispatch state shared with the autograd functions (public for them, not for callers).
  struct Exchange {
    distributed::Communicator* group = nullptr;
    double waited_seconds = 0;
    int64_t sent_bytes = 0;
  };

 private:
  std::shared_ptr<distributed::Communicator> group_;
  std::unique_ptr<Exchange> exchange_;  // a stable address the hooks and autograd nodes hold
  ShardLayouts layouts_;
};

// Rows of `input` in blocks of input_splits[j] to rank j, the blocks from every rank in
// output_splits order, with autograd (backward: the gradients the reverse way). For tests too.
torch::Tensor all_to_all_rows(const torch::Tensor& input, const std::vector<int64_t>& output_splits,
                              const std::vector<int64_t>& input_splits, ExpertParallel::Exchange& exchange);

}  // namespace ctitan::parallel::ep
