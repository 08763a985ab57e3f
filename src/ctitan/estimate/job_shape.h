#pragma once
// The shapes job_estimate's memory walks and time model share: the widths a decoder block works
// with, its parameters as FSDP shards them, and how a pipeline splits the layers into stages.
// Internal to estimate/.
#include <cstdint>
#include <vector>

#include "ctitan/estimate/job_estimate.h"
#include "ctitan/models/common/model_args.h"

namespace ctitan::estimate::detail {

// The widths one block works with, per token.
struct Widths {
  int64_t d = 0;      // model dim
  int64_t hd = 0;     // n_heads * head_dim: q and attention output
  int64_t kv = 0;     // n_kv_heads * head_dim: k and v as projected
  int64_t f = 0;      // FFN hidden
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  int64_t layers = 0;
  bool gqa = false;      // n_kv_heads < n_heads: repeat_kv materializes k and v at width hd
  bool qk_norm = false;  // RMSNorm on each query and key head (Qwen3): weights of head_dim
  bool tied = false;     // the output layer multiplies by tok_embeddings' weight: no weight of its own
  explicit Widths(const models::ModelArgs& a)
      : d(a.dim), hd(a.n_heads * a.head_dim()), kv(a.kv_heads() * a.head_dim()), f(a.ffn_hidden_dim()),
        heads(a.n_heads), kv_heads(a.kv_heads()), head_dim(a.head_dim()), vocab(a.vocab_size), layers(a.n_layers),
        gqa(a.kv_heads() < a.n_heads), qk_norm(a.qk_norm), tied(a.tie_word_embeddings) {}
  // k and v as attention receives them (and saves them).
  int64_t kv_attended() const { return gqa ? hd : kv; }
};

// One parameter: dim-0 rows (what FSDP shards) by the rest.
struct Weight {
  int64_t rows = 0, cols = 0;
  bool linear = false;  // a matmul weight: autocast casts it, float8 converts it
  int64_t numel() const { return rows * cols; }
};

// A block's parameters: wq wk wv wo, w1 w2 w3, the two norms, then q_norm and k_norm with QK-norm.
std::vector<Weight> block_weights(const Widths& w);

// Elements of `ws`; of its matmul weights only with `linear_only`.
int64_t numel(const std::vector<Weight>& ws, bool linear_only = false);

// FSDP's flat shard of one fully_shard group on rank 0, the largest: every parameter's dim-0 rows
// split in ceil(rows / N) pieces, padding included (parallel/fsdp/fsdp_param_group.cpp).
int64_t padded_shard_numel(const std::vector<Weight>& ws, int64_t shards);

// Pipeline stages of torchtitan's generated split: the first stage gets L / S layers, the next
// (L mod S) stages one more, the last what is left.
std::vector<int64_t> stage_layers(int64_t layers, int64_t stages);

// Pipeline stages each rank holds: 2 under Interleaved 1F1B, else 1.
int64_t stages_per_rank(const JobShape& job);
// Microbatches a step's local batch is cut into for the pipeline schedule (1 without PP).
int64_t pp_microbatches(const JobShape& job);

}  // namespace ctitan::estimate::detail
