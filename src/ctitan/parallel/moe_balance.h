#pragma once
// Auxiliary-loss-free load balancing of a model's MoE layers (DeepSeek-V3), applied from outside
// as torchtitan's optimizer step pre-hook: once per step, after the last microbatch's backward,
// each layer's tokens per expert are summed over every rank that routed other tokens through the
// same experts, and each expert's selection bias moves by coeff toward the mean load:
//   delta_e = coeff * sign(mean(n) - n_e), re-centred to mean zero (torchtitan #1506),
// so an overloaded expert is chosen less. Outside autograd; every rank computes the same delta
// from the same sums, so the replicas' biases stay equal without being sent.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/distributed/communicator.h"
#include "ctitan/models/common/transformer.h"

namespace ctitan::parallel {

class ExpertBalance {
 public:
  // `parts`: this rank's model parts. `groups`: the groups over which ranks route different tokens
  // through the same experts (the batch's dp x cp group, and tp, whose ranks route their own
  // shares of the sequence); null or size-one groups are skipped.
  ExpertBalance(const std::vector<models::TransformerImpl*>& parts,
                std::vector<std::shared_ptr<distributed::Communicator>> groups);
  bool empty() const { return layers_.empty(); }
  // Sums the counts, moves every bias, resets the counts. Collective over the groups: every rank
  // calls it at the same step boundary (the trainer, before the optimizer step).
  void update();
  // The last update's loads per layer for the metrics: "moe/layer_3/load_min" (the least loaded
  // expert's share of the mean, 1 = balanced), load_max, load_cv (coefficient of variation),
  // routed (the step's expert choices summed over the ranks: global tokens x top_k when every
  // token is counted once), and bias_min / bias_max; with the balance loss, moe/aux_loss (its
  // share of the last step's loss). Read on the host (at a log step only); empty before the
  // first update.
  std::vector<std::pair<std::string, double>> load_metrics() const;

 private:
  struct Layer {
    int64_t layer_id;
    models::MoEImpl* moe;
  };
  std::vector<Layer> layers_;
  std::vector<std::shared_ptr<distributed::Communicator>> groups_;
  torch::Tensor last_counts_;  // (L, E) fp32: the last update's sums (overwritten each step)
  torch::Tensor last_aux_loss_;  // 0-d fp32: the last step's balance loss over the ranks, or undefined
};

}  // namespace ctitan::parallel
