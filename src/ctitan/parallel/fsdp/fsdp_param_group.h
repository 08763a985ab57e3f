#pragma once
// The parameters of one fully_shard call (a block, or [norm, output]): their shards live in one
// flat fp32 buffer, so gathering the group is one all-gather and reducing its gradients is one
// reduce-scatter.
//
// Lifetime of the unsharded parameters (FSDP2's): unshard() all-gathers into a temporary buffer
// and copies each parameter out into its own tensor, which becomes the module parameter's data;
// reshard() resizes that tensor's storage to zero bytes (the parameter keeps its shape and
// identity for autograd), so the memory is freed at once. Buffers handed to a collective are held by its Work until wait(), no longer.
// The all-gather is in place: its input is this rank's slot of the gathered buffer.
// What FSDP holds for a while (gathered parameters, their gradients until copied for reduction,
// collective buffers) is tagged for the memory tracker (metrics/memory_tracker.h).
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "ctitan/parallel/fsdp/fsdp_options.h"
#include "ctitan/parallel/fsdp/sharded_param.h"

namespace ctitan::distributed {
class Work;
}

namespace ctitan::parallel::fsdp {

class FSDPParamGroup {
 public:
  // Takes each module parameter's rows for this rank into the flat shard and frees the rest.
  FSDPParamGroup(std::string name, std::vector<std::pair<std::string, torch::Tensor>> module_params, MeshGroups groups,
             MixedPrecisionPolicy mp, bool reshard_after_forward);

  const std::string& name() const { return name_; }
  bool reshard_after_forward() const { return reshard_after_forward_; }
  std::vector<ShardedParam>& params() { return params_; }
  const std::vector<ShardedParam>& params() const { return params_; }

  // Issues the all-gather without waiting (a prefetch); nothing if unsharded or already issued.
  void unshard_async();
  // Completes the all-gather (issuing it first if needed) and makes the module parameters hold
  // the unsharded data in param_dtype. Returns the seconds spent blocked on communication.
  double unshard();
  // Module parameters' storage is freed again; a prefetched gather still in flight is dropped.
  void reshard();

  // After this group's backward: moves the module parameters' gradients into the reduce buffer
  // and frees them. With `sync` the buffer (plus any accumulated, unsynced microbatches) is
  // reduce-scattered asynchronously; without, it is kept for the next microbatch.
  void post_backward(bool sync);
  // Waits for the reduction issued by post_backward (and the replica all-reduce under HSDP) and
  // adds the result into the sharded parameters' .grad. Returns the seconds spent blocked.
  double finish_reduce();
  bool reduce_pending() const { return reduce_work_ != nullptr; }

 private:
  torch::Tensor gradients_into_reduce_buffer() const;

  std::string name_;
  std::vector<ShardedParam> params_;
  MeshGroups groups_;
  MixedPrecisionPolicy mp_;
  bool reshard_after_forward_;
  int64_t world_ = 1, rank_ = 0;

  torch::Tensor flat_shard_;  // (S,) fp32: every param's padded shard, back to back; S = sum of padded shard numels
  bool unsharded_ = false;
  std::shared_ptr<distributed::Work> gather_work_;
  torch::Tensor gathered_;           // (N * S,) param_dtype: rank r's flat shard at [r*S, (r+1)*S)
  torch::Tensor unsynced_grads_;     // (N * S,) reduce_dtype: gradients of microbatches not reduced yet
  std::shared_ptr<distributed::Work> reduce_work_;
  torch::Tensor reduced_;            // (S,) reduce_dtype: this rank's reduced gradient shard
};

}  // namespace ctitan::parallel::fsdp
