#pragma once
#include <torch/torch.h>

#include <vector>

namespace ctitan::distributed {
class Communicator;
}

namespace ctitan::train {

// Global L2 norm of all gradients, as a 0-d fp32 tensor on the gradients' device: nothing here
// reads it on the host, so a GPU step does not wait for it (the trainer reads it at log steps).
// CPU gradients' sum of squares is accumulated in fp64 by ops::sum_of_squares.
// With `shard_group`, the gradients are this rank's shards (FSDP): the local sums of squares
// are added over the group before the square root, giving the norm of the whole gradient.
torch::Tensor grad_l2_norm(const std::vector<torch::Tensor>& params,
                           distributed::Communicator* shard_group = nullptr);

// Scales every gradient by min(1, max_norm / (norm + 1e-6)), a tensor op, and returns the norm
// before clipping. max_norm <= 0 only measures.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             distributed::Communicator* shard_group = nullptr);

}  // namespace ctitan::train
