#pragma once
#include <torch/torch.h>

#include <vector>

namespace ctitan::distributed {
class Communicator;
}

namespace ctitan::components {

// How the gradients are spread over the mesh, so the norm counts each element of the whole
// gradient exactly once.
struct GradNormGroups {
  // FSDP: each parameter is this rank's shard over this group (replicas of HSDP hold copies).
  distributed::Communicator* shard = nullptr;
  // TP: each parameter is also this rank's slice over this group, except those flagged in
  // `tp_replicated` (by index in params: the norm weights), which every tp rank holds whole.
  distributed::Communicator* tp = nullptr;
  std::vector<bool> tp_replicated;
  // PP: each rank holds only its stages' parameters; the squares add up over this group
  // (torchtitan's pp-mesh all-reduce of the p-th powers, its issue #596).
  distributed::Communicator* pp = nullptr;
};

// Global L2 norm of all gradients, as a 0-d fp32 tensor on the gradients' device: nothing here
// reads it on the host, so a GPU step does not wait for it (the trainer reads it at log steps).
// CPU gradients' sum of squares is accumulated in fp64 by ops::sum_of_squares. Local sums of
// squares are added over the shard group, and the tp-sliced ones over the tp group, before the
// square root.
torch::Tensor grad_l2_norm(const std::vector<torch::Tensor>& params, const GradNormGroups& groups = {});

// Scales every gradient by min(1, max_norm / (norm + 1e-6)), a tensor op, and returns the norm
// before clipping. max_norm <= 0 only measures.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             const GradNormGroups& groups = {});

}  // namespace ctitan::components
