#pragma once
// DataParallel: the one interface the trainer sees of data parallelism, whichever kind was
// applied to the model (DDP replicates, FSDP/HSDP shards). Tensor and pipeline parallelism will
// meet the trainer through the same few calls, not through branches on the wrapper's type.
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "ctitan/common/state_dict.h"

namespace ctitan::parallel {

class DataParallel {
 public:
  virtual ~DataParallel() = default;

  // false: the next backward only accumulates gradients locally (all microbatches but the last,
  // FSDP2's set_requires_gradient_sync(False)); true: it reduces them, with what accumulated.
  virtual void set_requires_gradient_sync(bool sync) = 0;
  // false: the next backward keeps the unsharded parameters for a later backward (a pipeline
  // stage runs several microbatches' backwards per step; FSDP2's set_reshard_after_backward).
  // Only FSDP holds anything to reshard.
  virtual void set_reshard_after_backward(bool reshard) {}
  // The tensors the optimizer steps on, by the model's FQNs: the parameters themselves (DDP), or
  // this rank's fp32 shards of them (FSDP).
  virtual std::vector<std::pair<std::string, torch::Tensor>> parameters_to_optimize() const = 0;
  // Where each of those tensors sits in its global tensor, by FQN; empty when all are whole.
  virtual ShardLayouts shard_layouts() const = 0;
  // Seconds the training thread was blocked on this wrapper's collectives since the last call:
  // the communication that compute did not hide.
  virtual double take_exposed_comm_seconds() = 0;
  // Gradient-sync latency since the last call: seconds from the end of backward compute (the
  // autograd engine's final callback) until every gradient is reduced and ready for the optimizer.
  virtual double take_grad_sync_seconds() = 0;
};

}  // namespace ctitan::parallel
