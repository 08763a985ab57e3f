#pragma once
// Data parallelism by replication (PyTorch's DDP), applied to a model from outside.
//
// Gradients are all-reduced in buckets of about bucket_cap_mb, each launched asynchronously as
// soon as all its gradients have been accumulated, so communication overlaps the rest of the
// backward pass. The reduction is a SUM: the trainer's loss is already divided by the token count
// of the whole global batch (all ranks), so summing gives the exact token-weighted mean.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "ctitan/common/torch_versions.h"
#include "ctitan/parallel/data_parallel.h"

namespace ctitan::distributed {
class Communicator;
class Work;
}  // namespace ctitan::distributed

namespace ctitan::parallel {

class DistributedDataParallel final : public DataParallel {
 public:
  // Broadcasts the parameters from group rank 0 so every replica starts identical, then installs
  // a post-accumulation hook on every parameter.
  DistributedDataParallel(std::vector<std::pair<std::string, torch::Tensor>> named_params,
                          std::shared_ptr<distributed::Communicator> group, double bucket_cap_mb);
  ~DistributedDataParallel() override;

  // false: gradients only accumulate locally (all microbatches but the last); true: the next
  // backward all-reduces the accumulated gradients.
  void set_requires_gradient_sync(bool sync) override { sync_ = sync; }
  // The replicated parameters themselves.
  std::vector<std::pair<std::string, torch::Tensor>> parameters_to_optimize() const override { return params_; }
  ShardLayouts shard_layouts() const override { return {}; }  // every tensor is whole
  // Seconds the training thread spent blocked waiting for gradient all-reduces since the last
  // call: the communication that backward did not hide.
  double take_exposed_comm_seconds() override;
  double take_grad_sync_seconds() override;
  size_t num_buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    torch::Tensor flat;          // (sum of numels,) fp32 reduce buffer
    size_t ready = 0;
    std::shared_ptr<distributed::Work> work;
  };
  class ReadyHook;

  void mark_ready(size_t param_index);
  void launch_ready_buckets();
  void finish_backward();  // runs as the autograd engine's final callback

  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<size_t> bucket_of_;  // param index -> bucket index
  std::vector<Bucket> buckets_;
  size_t next_to_launch_ = 0;
  bool sync_ = true;
  bool callback_queued_ = false;
  double exposed_seconds_ = 0;
  double grad_sync_seconds_ = 0;
  std::shared_ptr<distributed::Communicator> group_;
  std::vector<torch_versions::NodePtr> accumulators_;  // kept alive: hooks live on them
};

}  // namespace ctitan::parallel
