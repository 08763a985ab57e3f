#pragma once
// Context parallelism applied to a model from outside: each part's attention becomes ring
// attention over the cp group, and each batch is cut to this rank's load-balanced chunks with
// their positions given to the model for RoPE. Gradients of the parameters are partial over cp
// (each rank's tokens only); FSDP over dp_shard x cp sums them (parallelized_model.cpp).
#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>

#include "ctitan/distributed/communicator.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/parallel/cp/ring_attention.h"

namespace ctitan::parallel::cp {

class ContextParallel {
 public:
  ContextParallel(std::vector<models::TransformerImpl*> parts, std::shared_ptr<distributed::Communicator> group,
                  config::CpRotateMethod method);
  ~ContextParallel();
  ContextParallel(const ContextParallel&) = delete;
  ContextParallel& operator=(const ContextParallel&) = delete;

  // inputs, labels: (B, T) -> this rank's (B, T / cp) each; the parts' token positions follow T.
  std::pair<torch::Tensor, torch::Tensor> shard_batch(const torch::Tensor& inputs, const torch::Tensor& labels);
  // x: (B, T, ...) -> this rank's (B, T / cp, ...), without touching the parts' positions.
  torch::Tensor local_part(const torch::Tensor& x) const;
  // Seconds blocked on the ring since the last call.
  double take_exposed_comm_seconds();

 private:
  std::vector<models::TransformerImpl*> parts_;
  std::shared_ptr<distributed::Communicator> group_;
  int64_t positions_for_ = -1;  // the T the parts' positions were set for
  RingAttention attention_;
};

}  // namespace ctitan::parallel::cp
