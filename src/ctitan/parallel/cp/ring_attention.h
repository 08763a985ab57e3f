#pragma once
// Ring attention over a context-parallel group: each rank holds its load-balanced two chunks of
// the sequence (load_balance.h); the keys and values of every rank reach it step by step
// (kv_rotation.h: a ring of hops, or one all-gather) while it computes the block attention of
// the pair it holds (attention_blocks.h); the blocks' partial outputs merge through their
// log-sum-exps in fp32. Backward visits the keys again and returns each rank's key/value
// gradients to it (fp32). The result equals causal attention over the whole sequence.
#include <torch/torch.h>

#include <memory>

#include "ctitan/config/job_config.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/parallel/cp/kv_rotation.h"

namespace ctitan::parallel::cp {

class RingAttention {
 public:
  RingAttention(std::shared_ptr<distributed::Communicator> group, config::CpRotateMethod method);
  ~RingAttention();
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

  // q: (B, Tl, H, D), k, v: (B, Tl, H_kv, D), H % H_kv == 0, Tl = T / cp: this rank's chunks r
  // and 2cp-1-r of the sequence. Returns (B, Tl, H * D), the rows of causal attention over the
  // whole sequence for this rank's queries, in q's dtype; differentiable in q, k and v. Every
  // rank of the group calls it together. This object must outlive the graph's backward.
  torch::Tensor operator()(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
  // Seconds blocked waiting for keys or gradients since the last call.
  double take_exposed_seconds();

  // What the autograd Function reaches through its address, since autograd's saved data holds
  // IValues only; this object outlives every graph built through it (see operator()).
  struct Settings {
    distributed::Communicator* group;
    RingTimes* times;
    config::CpRotateMethod method;
  };

 private:
  std::shared_ptr<distributed::Communicator> group_;
  RingTimes times_;
  Settings settings_;
};

}  // namespace ctitan::parallel::cp
