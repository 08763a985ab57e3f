#pragma once
// Tensor parallelism for the decoder with sequence parallel, applied from outside as torchtitan's
// parallelize_llama, in Megatron's layout, on the mesh's `tp` group. Which modules of a block
// split how is the family's plan (ModelSpec::parallelize_plan's tp, models/common/parallelize_plan.h); the dense
// decoder's plan (Llama 3, Qwen3) gives:
//
//   tok_embeddings  vocab-sharded rows; each rank looks up the ids it owns, the partial
//                   embeddings are reduce-scattered onto the sequence shard
//   attention_norm, ffn_norm, norm
//                   run on the local sequence shard (B, T/tp, dim); their weights are whole on
//                   every tp rank and their gradients are summed over the group
//   attention       input all-gathered on the sequence; wq, wk, wv column-wise (each rank has
//                   n_heads/tp query and n_kv_heads/tp kv heads, RoPE on full positions; QK-norm
//                   weights whole, their gradients summed over the group); wo
//                   row-wise, its partial output reduce-scattered onto the sequence shard
//   feed_forward    the same: w1, w3 column-wise, w2 row-wise
//   output          input all-gathered on the sequence; column-wise on the vocabulary; the
//                   logits stay vocab-sharded for loss parallel, or are all-gathered
//
// Async TP (enable_async_tensor_parallel): the same layout and collectives, but each all-gather is
// fused with the column-wise matmuls that read its output and each reduce-scatter with the
// row-wise matmul that feeds it, micro-pipelined on sequence chunks (collective_matmul.h). The
// hooks move from the modules' inputs and outputs onto the projections themselves.
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
#include "ctitan/models/common/transformer.h"

namespace ctitan::parallel::tp {

class ProjectionStash;

// Part `index` of `n` split into `parts` chunks of ceil(n / parts) (the last may be shorter).
struct ShardRange {
  int64_t offset = 0, size = 0;
};
ShardRange shard_range(int64_t n, int64_t parts, int64_t index);

// A ConfigError naming the numbers and the key when `tp` does not divide what it must:
// n_heads, n_kv_heads, dim, the feed-forward width and seq_len; a vocabulary that leaves a rank
// no rows is refused too (an uneven last shard is fine).
void validate_tensor_parallel(const models::ModelArgs& args, int64_t seq_len, int64_t tp);

class TensorParallel {
 public:
  // Slices `model`'s parameters to this rank's part and registers the plan's hooks on
  // model.hooks. `group` must outlive the model's forwards and backwards.
  TensorParallel(models::TransformerImpl& model, std::shared_ptr<distributed::Communicator> group,
                 bool loss_parallel, bool async = false);
  // The same plan over several model parts of one rank (an interleaved pipeline's stages): each
  // part's parameters are sliced and hooked; the parts' FQNs are disjoint.
  TensorParallel(const std::vector<models::TransformerImpl*>& parts,
                 std::shared_ptr<distributed::Communicator> group, bool loss_parallel, bool async = false);

  distributed::Communicator& group() const { return *group_; }
  bool loss_parallel() const { return loss_parallel_; }
  bool async() const { return async_; }
  // Async TP: column-wise projections that ran unfused because the fused call's output did not
  // reach them (projection_stash.h); 0 means every one was fused.
  int64_t unfused_projections() const;
  // Where each sliced parameter sits in its global tensor, by FQN.
  const ShardLayouts& shard_layouts() const { return layouts_; }
  // Parameters every tp rank holds whole but computes gradients for from its own sequence shard.
  bool replicated(const std::string& fqn) const { return replicated_.count(fqn) > 0; }

  // Sums the gradients of the replicated parameters among `params` (by FQN; the tensors the
  // optimizer steps on, whole or FSDP shards) over the tp group, in one all-reduce.
  void reduce_replicated_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& params) const;

  // Seconds the training thread was blocked in tp collectives since the last call: all of their
  // time when synchronous; with async TP, only what the overlap did not hide.
  double take_exposed_comm_seconds();

  // Loss parallel: logits (B, T, V_r) this rank's vocabulary columns, labels (B, T) -> the
  // summed cross-entropy over the whole vocabulary (vocab_parallel_loss.h).
  torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels,
                                                 int64_t ignore_index) const;

 private:
  // Slices and hooks one model part (what is present of it: a pipeline stage holds only some).
  void apply_plan(models::TransformerImpl& model);
  // Replaces `param` by its slice along `dim` and records the slice's layout under `fqn`.
  void slice(const std::string& fqn, torch::Tensor param, int64_t dim, ShardRange range);
  // The hooks of one attention or feed-forward module: its input gathered and its output
  // reduce-scattered, or with async TP the same collectives fused with the projections.
  void hook_sublayer(models::ModuleHooks& hooks, const torch::nn::Module& module,
                     const std::vector<torch::nn::Linear>& column_wise, const torch::nn::Linear& row_wise);

  std::shared_ptr<distributed::Communicator> group_;
  bool loss_parallel_;
  bool async_;
  std::vector<std::shared_ptr<ProjectionStash>> stashes_;  // async: one per attention / feed-forward
  ShardRange vocab_;  // this rank's rows of tok_embeddings and output
  double reported_comm_seconds_ = 0;  // the tp group's blocked seconds already taken
  ShardLayouts layouts_;
  std::set<std::string> replicated_;
};

// TP slices sharded again by data parallelism (FSDP's rows of a TP-local tensor): the layout of
// each key in the global tensor, offsets adding up. Keys only one side shards keep its layout.
ShardLayouts nest_layouts(const ShardLayouts& tp, const ShardLayouts& dp);

}  // namespace ctitan::parallel::tp
