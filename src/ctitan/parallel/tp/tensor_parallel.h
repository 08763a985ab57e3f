#pragma once
// Tensor parallelism for Llama 3 with sequence parallel, applied from outside as torchtitan's
// parallelize_llama (its TP plan, in Megatron's layout), on the mesh's `tp` group:
//
//   tok_embeddings  vocab-sharded rows; each rank looks up the ids it owns, the partial
//                   embeddings are reduce-scattered onto the sequence shard
//   attention_norm, ffn_norm, norm
//                   run on the local sequence shard (B, T/tp, dim); their weights are whole on
//                   every tp rank and their gradients are summed over the group
//   attention       input all-gathered on the sequence; wq, wk, wv column-wise (each rank has
//                   n_heads/tp query and n_kv_heads/tp kv heads, RoPE on full positions); wo
//                   row-wise, its partial output reduce-scattered onto the sequence shard
//   feed_forward    the same: w1, w3 column-wise, w2 row-wise
//   output          input all-gathered on the sequence; column-wise on the vocabulary; the
//                   logits stay vocab-sharded for loss parallel, or are all-gathered
//
// Parameters are sliced in place (every rank built the same full model from the same seed);
// FSDP applied afterwards shards the slices. Checkpoints see the unsharded FQNs and global
// shapes through shard_layouts().
#include <torch/torch.h>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/models/llama/model.h"

namespace ctitan::parallel::tp {

// Part `index` of `n` split into `parts` chunks of ceil(n / parts) (the last may be shorter).
struct ShardRange {
  int64_t offset = 0, size = 0;
};
ShardRange shard_range(int64_t n, int64_t parts, int64_t index);

// A ConfigError naming the numbers and the key when `tp` does not divide what it must:
// n_heads, n_kv_heads, dim, the feed-forward width and seq_len; a vocabulary that leaves a rank
// no rows is refused too (an uneven last shard is fine).
void validate_tensor_parallel(const models::llama::ModelArgs& args, int64_t seq_len, int64_t tp);

class TensorParallel {
 public:
  // Slices `model`'s parameters to this rank's part and registers the plan's hooks on
  // model.hooks. `group` must outlive the model's forwards and backwards.
  TensorParallel(models::llama::TransformerImpl& model, std::shared_ptr<distributed::Communicator> group,
                 bool loss_parallel);

  distributed::Communicator& group() const { return *group_; }
  bool loss_parallel() const { return loss_parallel_; }
  // Where each sliced parameter sits in its global tensor, by FQN.
  const ShardLayouts& shard_layouts() const { return layouts_; }
  // Parameters every tp rank holds whole but computes gradients for from its own sequence shard.
  bool replicated(const std::string& fqn) const { return replicated_.count(fqn) > 0; }

  // Sums the gradients of the replicated parameters among `params` (by FQN; the tensors the
  // optimizer steps on, whole or FSDP shards) over the tp group, in one all-reduce.
  void reduce_replicated_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& params) const;

  // Seconds the training thread was blocked in tp collectives since the last call. Every TP
  // collective is synchronous, so all of it is exposed communication.
  double take_exposed_comm_seconds();

  // Loss parallel: logits (B, T, V_r) this rank's vocabulary columns, labels (B, T) -> the
  // summed cross-entropy over the whole vocabulary (vocab_parallel_loss.h).
  torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels,
                                                 int64_t ignore_index) const;

 private:
  // Replaces `param` by its slice along `dim` and records the slice's layout under `fqn`.
  void slice(const std::string& fqn, torch::Tensor param, int64_t dim, ShardRange range);

  std::shared_ptr<distributed::Communicator> group_;
  bool loss_parallel_;
  ShardRange vocab_;  // this rank's rows of tok_embeddings and output
  double reported_comm_seconds_ = 0;  // the tp group's blocked seconds already taken
  ShardLayouts layouts_;
  std::set<std::string> replicated_;
};

// TP slices sharded again by data parallelism (FSDP's rows of a TP-local tensor): the layout of
// each key in the global tensor, offsets adding up. Keys only one side shards keep its layout.
ShardLayouts nest_layouts(const ShardLayouts& tp, const ShardLayouts& dp);

}  // namespace ctitan::parallel::tp
