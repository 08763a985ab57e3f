#include "ctitan/metrics/job_estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/models/llama/flops.h"

namespace ctitan::metrics {
namespace {

using models::llama::ModelArgs;

// ---------------------------------------------------------------------------------------------
// Model shape
// ---------------------------------------------------------------------------------------------

// The widths one block works with, per token.
struct Widths {
  int64_t d = 0;      // model dim
  int64_t hd = 0;     // n_heads * head_dim: q and attention output
  int64_t kv = 0;     // n_kv_heads * head_dim: k and v as projected
  int64_t f = 0;      // FFN hidden
  int64_t heads = 0;
  int64_t vocab = 0;
  int64_t layers = 0;
  bool gqa = false;   // n_kv_heads < n_heads: repeat_kv materializes k and v at width hd
  explicit Widths(const ModelArgs& a)
      : d(a.dim), hd(a.n_heads * a.head_dim()), kv(a.kv_heads() * a.head_dim()), f(a.ffn_hidden_dim()),
        heads(a.n_heads), vocab(a.vocab_size), layers(a.n_layers), gqa(a.kv_heads() < a.n_heads) {}
  // k and v as attention receives them (and saves them).
  int64_t kv_attended() const { return gqa ? hd : kv; }
};

// One parameter: dim-0 rows (what FSDP shards) by the rest.
struct Weight {
  int64_t rows = 0, cols = 0;
  bool linear = false;  // a matmul weight: autocast casts it, float8 converts it
  int64_t numel() const { return rows * cols; }
};

std::vector<Weight> block_weights(const Widths& w) {
  return {{w.hd, w.d, true},  {w.kv, w.d, true}, {w.kv, w.d, true}, {w.d, w.hd, true},  // wq wk wv wo
          {w.f, w.d, true},   {w.d, w.f, true},  {w.f, w.d, true},                      // w1 w2 w3
          {w.d, 1, false},    {w.d, 1, false}};                                        // the two norms
}

int64_t numel(const std::vector<Weight>& ws, bool linear_only = false) {
  int64_t n = 0;
  for (const auto& w : ws) n += (!linear_only || w.linear) ? w.numel() : 0;
  return n;
}

// FSDP's flat shard of one fully_shard group on rank 0, the largest: every parameter's dim-0 rows
// split in ceil(rows / N) pieces, padding included (parallel/fsdp/fsdp_param_group.cpp).
int64_t padded_shard_numel(const std::vector<Weight>& ws, int64_t shards) {
  int64_t n = 0;
  for (const auto& w : ws) n += (w.rows + shards - 1) / shards * w.cols;
  return n;
}

// ---------------------------------------------------------------------------------------------
// The ledger: live bytes by category, and the moment of the peak
// ---------------------------------------------------------------------------------------------

enum Cat { kParams, kGrads, kOptim, kActs, kComm, kOther, kNumCats };

class Ledger {
 public:
  void at(std::string where) { where_ = std::move(where); }
  void add(Cat c, int64_t bytes) {
    live_[c] += bytes;
    total_ += bytes;
    if (total_ > peak_total_) {
      peak_total_ = total_;
      peak_ = live_;
      peak_where_ = where_;
    }
  }
  void free(Cat c, int64_t bytes) { add(c, -bytes); }
  // A tensor changes role without a new allocation (a reduce output becomes the gradient).
  void move(Cat from, Cat to, int64_t bytes) {
    live_[from] -= bytes;
    live_[to] += bytes;
  }
  int64_t peak() const { return peak_total_; }
  MemoryEstimate result() const {
    MemoryEstimate m;
    m.params_bytes = peak_[kParams];
    m.grads_bytes = peak_[kGrads];
    m.optimizer_bytes = peak_[kOptim];
    m.activations_bytes = peak_[kActs];
    m.comm_buffers_bytes = peak_[kComm];
    m.other_bytes = peak_[kOther];
    m.peak_bytes = peak_total_;
    m.peak_at = peak_where_;
    return m;
  }

 private:
  std::array<int64_t, kNumCats> live_{}, peak_{};
  int64_t total_ = 0, peak_total_ = 0;
  std::string where_ = "start of step", peak_where_;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------------
// CPU: ctitan's own step, tensor by tensor
// ---------------------------------------------------------------------------------------------
//
// Follows Trainer::forward_backward with the fused kernels of ops/ (what each autograd Function
// saves is in its forward), autocast's bf16 weight copies, parallel/fsdp and parallel/ddp. The
// autograd engine runs a node, releases what it saved and its incoming gradient, then runs the
// ready node created last in forward: a weight's AccumulateGrad (and autocast's cast back to fp32
// before it) right after its matmul. Left out: scalars, and scratch inside kernels (SDPA's
// per-thread blocks), tens of bytes to a few KB.
class CtitanCpuWalk {
 public:
  CtitanCpuWalk(const JobShape& job, Ledger& ledger) : job_(job), w_(job.model), L_(ledger) {
    const auto& g = job.degrees;
    fsdp_ = g.dp_shard > 1;
    ddp_ = g.dp_replicate > 1 && !fsdp_;
    shards_ = fsdp_ ? g.dp_shard : 1;
    n_ = job.local_batch_size * job.seq_len;
    // bf16: matmuls read bf16 weights (autocast's copies, or FSDP's bf16 gathers) and write bf16.
    c_ = job.bf16 ? 2 : 4;
    // The residual stream has the embedding's dtype: bf16 when FSDP hands the model bf16
    // parameters, fp32 when autocast runs over fp32 weights (the embedding is not autocast).
    r_ = fsdp_ ? c_ : 4;
    autocast_copies_ = job.bf16 && !fsdp_;
    rd_ = job.reduce_bf16 ? 2 : 4;
    add_group("tok_embeddings", {{w_.vocab, w_.d, false}});
    for (int64_t i = 0; i < w_.layers; ++i) add_group(fmt::format("layers.{}", i), block_weights(w_));
    add_group("norm, output", {{w_.d, 1, false}, {w_.vocab, w_.d, true}});
  }

  void run() {
    step_start();
    // The first microbatch; with accumulation, one in the middle and the last, which start
    // with the gradients of the earlier ones (every later middle one repeats the second).
    const int64_t k = job_.grad_accum_steps;
    std::vector<int64_t> microbatches{0};
    if (k > 2) microbatches.push_back(1);
    if (k > 1) microbatches.push_back(k - 1);
    for (auto mb : microbatches) {
      last_mb_ = mb + 1 == k;
      forward();
      backward();
      grads_present_ = !fsdp_ || job_.gradient_sync == config::GradientSync::kEveryMicrobatch;
      unsynced_present_ = fsdp_ && job_.gradient_sync == config::GradientSync::kLastMicrobatch;
    }
    L_.at("optimizer step");  // fused AdamW updates in place: nothing new but scalars
  }

  // Elements of the fp32 master weights on rank 0: FSDP's padded flat shards, or the model.
  int64_t state_numel() const {
    int64_t n = 0;
    for (const auto& g : groups_) n += g.shard;
    return n;
  }

 private:
  struct Group {
    std::string name;
    std::vector<Weight> weights;
    int64_t unsharded = 0;  // numel
    int64_t shard = 0;      // flat shard numel on rank 0 (padding included); the whole group without FSDP
  };

  void add_group(std::string name, std::vector<Weight> ws) {
    groups_.push_back({std::move(name), ws, numel(ws), padded_shard_numel(ws, shards_)});
    unsharded_.push_back(false);
    gathering_.push_back(false);
  }

  // --- what lives for the whole step -------------------------------------------------------

  void step_start() {
    L_.at("start of step");
    const auto& m = job_.model;
    // RoPE tables: cos and sin, (max_seq_len, head_dim / 2) fp32, built at the first forward.
    L_.add(kOther, 2 * std::max(m.max_seq_len, job_.seq_len) * (m.head_dim() / 2) * 4);
    // The global batch, loaded before the step: inputs and labels, int64, per microbatch.
    L_.add(kOther, job_.grad_accum_steps * 2 * n_ * 8);
    int64_t shard_numel = 0, max_reduce = 0, max_shard = 0;
    for (const auto& g : groups_) {
      shard_numel += g.shard;
      max_reduce = std::max(max_reduce, shards_ * g.shard * rd_);
      max_shard = std::max(max_shard, g.shard);
    }
    L_.add(kParams, 4 * shard_numel);  // fp32 master weights: FSDP's flat shards, or the whole model
    L_.add(kOptim, 8 * shard_numel);   // AdamW's exp_avg and exp_avg_sq, one fp32 each per element
    if (fsdp_) {
      // The reduce-scatter's receive buffer comes from a pool that keeps the largest one given
      // back (distributed/scratch_pool.h): from the second step on it is allocated throughout.
      L_.add(kComm, max_reduce);
      // HSDP with a bf16 reduction: the replica all-reduce sends bf16 as a pooled fp32 wire.
      if (job_.degrees.dp_replicate > 1 && rd_ == 2) L_.add(kComm, max_shard * 4);
    }
    // DDP: one persistent fp32 flat buffer per bucket, together a copy of every parameter.
    if (ddp_) L_.add(kComm, 4 * shard_numel);
  }

  // --- FSDP group lifetimes (parallel/fsdp/fsdp_param_group.cpp) -----------------------------

  int64_t gathered_bytes(const Group& g) const { return shards_ * g.shard * c_; }
  // The all-gather's input: the flat shard cast to param dtype (none when that is fp32).
  int64_t cast_bytes(const Group& g) const { return c_ == 4 ? 0 : g.shard * c_; }

  void issue_gather(int64_t i) {
    if (!fsdp_ || i < 0 || i >= int64_t(groups_.size()) || unsharded_[i] || gathering_[i]) return;
    gathering_[i] = true;
    L_.add(kComm, cast_bytes(groups_[i]) + gathered_bytes(groups_[i]));
  }
  // unshard_with_prefetch: issue this group's gather and the prefetch, wait for this one (the
  // Work drops its cast input), give each parameter its storage and copy out, drop the gathered
  // buffer.
  void unshard(int64_t i, int64_t prefetch) {
    if (!fsdp_) return;
    issue_gather(i);
    issue_gather(prefetch);
    if (unsharded_[i]) return;
    L_.free(kComm, cast_bytes(groups_[i]));
    L_.add(kParams, groups_[i].unsharded * c_);
    L_.free(kComm, gathered_bytes(groups_[i]));
    gathering_[i] = false;
    unsharded_[i] = true;
  }
  void reshard(int64_t i) {
    if (!fsdp_ || !unsharded_[i]) return;
    L_.free(kParams, groups_[i].unsharded * c_);
    unsharded_[i] = false;
  }
  bool reshards_after_forward(int64_t i) const {
    using R = config::ReshardAfterForward;
    if (job_.reshard_after_forward == R::kNever) return false;
    return i + 1 < int64_t(groups_.size()) || job_.reshard_after_forward == R::kAlways;
  }

  // post-backward of group i: complete the reduction in flight, copy the group's gradients into
  // a reduce buffer and free them, start its reduce-scatter, reshard.
  void post_backward(int64_t i) {
    if (!fsdp_) return;
    const auto& g = groups_[i];
    L_.at(fmt::format("backward: {} reduce-scatter", g.name));
    finish_pending_reduce();
    const bool sync = last_mb_ || job_.gradient_sync == config::GradientSync::kEveryMicrobatch;
    const int64_t buffer = shards_ * g.shard * rd_;
    L_.add(kComm, buffer);
    L_.free(kGrads, g.unsharded * c_);  // the module's unsharded (param dtype) gradients
    if (unsynced_present_) {
      L_.free(kComm, buffer);  // added into the unsynced sum of the earlier microbatches
      if (sync) L_.move(kGrads, kComm, buffer);  // which is what goes out
    } else if (!sync) {
      L_.move(kComm, kGrads, buffer);  // kept, unreduced, for the next microbatch
    }
    if (sync) {
      L_.add(kComm, g.shard * rd_);  // this rank's reduced shard; the receive buffer is the pool's
      pending_ = i;
    }
    reshard(i);
  }
  void finish_pending_reduce() {
    if (pending_ < 0) return;
    const auto& g = groups_[pending_];
    if (rd_ == 2) {
      // wait() sums the N received bf16 chunks in fp32 (distributed/wire_format.cpp): a CPU sum
      // to another dtype converts its whole input first, then the (S,) fp32 sum is rounded into
      // the reduced shard.
      L_.add(kComm, shards_ * g.shard * 4 + g.shard * 4);
      L_.free(kComm, shards_ * g.shard * 4 + g.shard * 4);
    }
    L_.free(kComm, shards_ * g.shard * rd_);  // the reduce-scatter's input, released by wait()
    if (rd_ == 4) {
      L_.move(kComm, kGrads, g.shard * 4);    // the sharded .grad are views of the reduced shard
    } else {
      L_.add(kGrads, g.shard * 4);            // converted to fp32
      L_.free(kComm, g.shard * rd_);
    }
    if (grads_present_) L_.free(kGrads, g.shard * 4);  // added into the existing sharded .grad
    pending_ = -1;
  }

  // --- forward -------------------------------------------------------------------------------

  void forward() {
    const int64_t N = n_, d = w_.d;
    const int64_t last = int64_t(groups_.size()) - 1;
    L_.at("forward: tok_embeddings");
    unshard(0, 1);
    L_.add(kActs, N * d * r_);  // the embedding output: layers.0's input, saved by its attention_norm
    if (reshards_after_forward(0)) reshard(0);
    for (int64_t i = 1; i <= w_.layers; ++i) {
      L_.at(fmt::format("forward: {}", groups_[i].name));
      unshard(i, i + 1);
      // bf16 copies of the block's seven matmul weights, saved by their matmuls for backward.
      if (autocast_copies_) L_.add(kParams, 2 * numel(groups_[i].weights, /*linear_only=*/true));
      L_.add(kActs, block_saved_bytes());
      if (reshards_after_forward(i)) reshard(i);
    }
    L_.at("forward: norm, output");
    unshard(last, -1);
    if (autocast_copies_) L_.add(kParams, 2 * w_.vocab * d);
    // The final norm saves the last block's output (counted with that block) and rstd; its
    // output is saved by the output matmul.
    L_.add(kActs, N * 4 + N * d * c_);
    L_.add(kActs, N * w_.vocab * c_);  // logits (B*T, vocab): bf16 under bf16, fp32 in fp32 training
    if (reshards_after_forward(last)) reshard(last);
    L_.at("forward: cross-entropy");
    L_.add(kActs, N * 4);   // logsumexp per row, saved
    L_.add(kActs, N * 4);   // per-row losses, summed then dropped
    L_.free(kActs, N * 4);
  }

  // What one block's fused kernels save for backward (the autograd Functions in ops/).
  int64_t block_saved_bytes() const {
    const int64_t d = w_.d;
    int64_t per_token = 0;
    per_token += 4 + d * c_;                              // attention_norm: rstd; output (saved by wq, wk, wv)
    per_token += w_.hd * c_ + 2 * w_.kv_attended() * c_;  // SDPA's inputs: q, k after RoPE; v (k, v repeated under GQA)
    per_token += w_.hd * c_ + 4 * w_.heads;               // SDPA's output (also wo's input), logsumexp fp32
    per_token += d * r_;                                  // h = x + attention: ffn_norm's input
    per_token += 4 + d * c_;                              // ffn_norm: rstd; output (saved by w1, w3)
    per_token += 3 * w_.f * c_;                           // w1, w3 outputs (SwiGLU's a, b); SwiGLU's output (w2's input)
    per_token += d * r_;                                  // the block output: the next block's (or norm's) input
    return n_ * per_token;
  }

  // --- backward ------------------------------------------------------------------------------

  // A matmul's backward: its input gradient and its weight gradient (in the compute dtype), then
  // the release of what it saved and of its incoming gradient (`released` bytes of activations,
  // and autocast's bf16 weight copy), then the weight's AccumulateGrad.
  void matmul_backward(const Weight& wt, int64_t grad_in_numel, int64_t released) {
    const int64_t n = wt.numel();
    L_.add(kActs, grad_in_numel * c_ + n * c_);
    L_.free(kActs, released);
    if (autocast_copies_) L_.free(kParams, 2 * n);
    int64_t bytes = c_;
    if (autocast_copies_) {  // autocast's cast node: the gradient back in the fp32 weight's dtype
      L_.add(kActs, n * 4);
      L_.free(kActs, n * c_);
      bytes = 4;
    }
    accumulate(n * bytes);
  }
  // AccumulateGrad steals the gradient into .grad, or adds it into the one accumulated by
  // earlier microbatches and frees it. FSDP's module gradients never outlive their group's
  // post-backward, so they always start empty.
  void accumulate(int64_t bytes) {
    L_.move(kActs, kGrads, bytes);
    if (grads_present_ && !fsdp_) L_.free(kGrads, bytes);
  }
  int64_t norm_weight_grad_bytes() const { return w_.d * (fsdp_ ? c_ : 4); }

  // RMSNormFn::backward: the incoming gradient converted to x's dtype (a copy when the residual
  // is fp32 and the gradient bf16), dx, per-chunk partial sums of the weight gradient; then the
  // release of the incoming gradient, the conversion, and the saved x and rstd (`x_bytes`: 0 when
  // x stays saved by someone else).
  void rms_norm_backward(int64_t x_bytes) {
    const int64_t N = n_, d = w_.d;
    const int64_t convert = r_ != c_ ? N * d * r_ : 0;
    L_.add(kActs, convert + N * d * r_ + ceil_div(N, 64) * d * 4);
    L_.free(kActs, ceil_div(N, 64) * d * 4);
    L_.add(kActs, norm_weight_grad_bytes());
    accumulate(norm_weight_grad_bytes());
    L_.free(kActs, convert + N * d * c_ + x_bytes + N * 4);
  }

  void backward() {
    const int64_t N = n_, d = w_.d, V = w_.vocab;
    const int64_t last = int64_t(groups_.size()) - 1;
    L_.at("backward: cross-entropy");
    L_.add(kActs, N * V * c_);            // dlogits, while the saved logits are still held
    L_.free(kActs, N * V * c_ + N * 4);  // the saved logits and logsumexp
    L_.at("backward: output");
    unshard(last, last - 1);             // the hook on the logits: gather (under "always"), prefetch the last block
    matmul_backward({V, d, true}, N * d, N * V * c_ + N * d * c_);  // releases dlogits and the saved norm output
    L_.at("backward: norm");
    rms_norm_backward(N * d * r_);       // releases the last block's output
    post_backward(last);
    // From here one gradient of width d (r bytes) flows down the residual stream.
    for (int64_t i = w_.layers; i >= 1; --i) block_backward(i);
    L_.at("backward: tok_embeddings");
    unshard(0, -1);
    // The dense (V, d) weight gradient, in the dtype of the gradient reaching the embedding.
    L_.add(kActs, V * d * (fsdp_ ? c_ : 4));
    accumulate(V * d * (fsdp_ ? c_ : 4));
    L_.free(kActs, N * d * r_);
    // FSDP's end-of-backward callback: the embeddings' post-backward, then every reduction.
    post_backward(0);
    L_.at("backward: end (reductions)");
    finish_pending_reduce();
    for (int64_t i = 0; i <= last; ++i) reshard(i);
  }

  void block_backward(int64_t i) {
    const int64_t N = n_, d = w_.d, f = w_.f, hd = w_.hd, kv = w_.kv, kva = w_.kv_attended();
    const auto& ws = groups_[i].weights;  // wq wk wv wo w1 w2 w3 attention_norm ffn_norm
    const std::string& name = groups_[i].name;
    // The residual add's gradient, cast to a branch output's dtype when they differ.
    const int64_t to_c = r_ != c_ ? N * d * c_ : 0;
    L_.at(fmt::format("backward: {} (gather)", name));
    unshard(i, i - 1);  // the hook on the block's output: gather it again, prefetch the block below

    L_.at(fmt::format("backward: {} w2", name));
    L_.add(kActs, to_c);
    matmul_backward(ws[5], N * f, N * f * c_ + to_c);  // releases SwiGLU's output
    L_.at(fmt::format("backward: {} SwiGLU", name));
    L_.add(kActs, 2 * N * f * c_);                     // da, db
    L_.free(kActs, 3 * N * f * c_);                    // saved a, b; the incoming gradient
    L_.at(fmt::format("backward: {} w1, w3", name));
    matmul_backward(ws[6], N * d, N * f * c_);         // w3; releases db
    // w1; its input gradient is summed with w3's (one buffer freed), releases da and the saved
    // ffn_norm output, held by both.
    matmul_backward(ws[4], N * d, N * d * c_ + N * f * c_ + N * d * c_);
    L_.at(fmt::format("backward: {} ffn_norm", name));
    rms_norm_backward(N * d * r_);                     // releases the saved h
    L_.free(kActs, N * d * r_);                        // dx summed into the residual gradient

    L_.at(fmt::format("backward: {} wo", name));
    L_.add(kActs, to_c);
    matmul_backward(ws[3], N * hd, to_c);              // the SDPA output it saved is SDPA's too
    L_.at(fmt::format("backward: {} attention", name));
    L_.add(kActs, N * (hd + 2 * kva) * c_);            // dq, dk, dv
    L_.free(kActs, N * (2 * hd + 2 * kva) * c_ + N * 4 * w_.heads + N * hd * c_);  // q k v, output, lse; incoming
    if (w_.gqa) {                                      // repeat_kv's backward sums dk, dv back to kv width
      L_.add(kActs, 2 * N * kv * c_);
      L_.free(kActs, 2 * N * kva * c_);
    }
    L_.at(fmt::format("backward: {} wq, wk, wv", name));
    matmul_backward(ws[2], N * d, N * kv * c_);        // wv; releases dv
    L_.add(kActs, N * kv * c_);                        // RoPE's backward of dk
    L_.free(kActs, N * kv * c_);
    matmul_backward(ws[1], N * d, N * d * c_ + N * kv * c_);  // wk; summed into wv's
    L_.add(kActs, N * hd * c_);                        // RoPE's backward of dq
    L_.free(kActs, N * hd * c_);
    // wq; summed; releases the saved attention_norm output, held by all three.
    matmul_backward(ws[0], N * d, N * d * c_ + N * hd * c_ + N * d * c_);
    L_.at(fmt::format("backward: {} attention_norm", name));
    rms_norm_backward(N * d * r_);                     // releases x, the block input
    L_.free(kActs, N * d * r_);                        // dx summed into the residual gradient
    post_backward(i);
  }

  const JobShape& job_;
  Widths w_;
  Ledger& L_;
  bool fsdp_ = false, ddp_ = false, autocast_copies_ = false;
  int64_t shards_ = 1, n_ = 0;
  int64_t c_ = 2, r_ = 4, rd_ = 4;  // bytes: compute (and param) dtype, residual stream, reduction
  std::vector<Group> groups_;
  std::vector<bool> unsharded_, gathering_;
  int64_t pending_ = -1;  // group whose reduce-scatter is in flight
  bool last_mb_ = true, grads_present_ = false, unsynced_present_ = false;
};

// ---------------------------------------------------------------------------------------------
// GPU: torchtitan's step, block by block
// ---------------------------------------------------------------------------------------------
//
// torchtitan's Llama 3 in PyTorch ops (or torch.compile'd blocks) under FSDP2 with bf16 params
// and fp32 reduction, TP with sequence parallel and loss parallel, PP with its schedules, and
// activation checkpointing per block. Sources (torchtitan 9dec370, the commit of the published
// H100 runs): parallelize_llama.py (the selective-op save list, FSDP groups: one per block, the
// last block not resharded after forward, the root holding embeddings, norm and output),
// pipeline_llama.py / pipelining_utils.py (stage splits, microbatches = stages), train.py (the
// loss: cross-entropy of the logits cast to fp32; the logits deleted before backward).

// Pipeline stages of torchtitan's generated split: the first stage gets L / S layers, the next
// (L mod S) stages one more, the last what is left.
std::vector<int64_t> stage_layers(int64_t layers, int64_t stages) {
  std::vector<int64_t> out(size_t(stages), 0);
  if (stages == 1) return {layers};
  const int64_t base = layers / stages;
  int64_t extra = layers % stages, at = 0;
  for (int64_t s = 0; s + 1 < stages; ++s) {
    const int64_t n = s == 0 ? base : base + (extra > 0 ? 1 : 0);
    if (s > 0 && extra > 0) --extra;
    out[size_t(s)] = n;
    at += n;
  }
  out.back() = layers - at;
  return out;
}

int64_t stages_per_rank(const JobShape& job) {
  return job.degrees.pp > 1 && job.pp_schedule == PipelineSchedule::kInterleaved1F1B ? 2 : 1;
}
int64_t pp_microbatches(const JobShape& job) {
  if (job.degrees.pp == 1) return 1;
  return job.pp_microbatches > 0 ? job.pp_microbatches : job.degrees.pp;
}

// Per-token byte counts of one block's activations on one GPU (TP degree t: sequence-parallel
// tensors are 1/t of the tokens, head- and hidden-sharded ones 1/t of the width; the inputs of
// the column-parallel matmuls are all-gathered to the whole sequence).
struct GpuBlockBytes {
  double saved = 0;      // kept from forward to backward, per the AC mode
  double recompute = 0;  // materialized again for the block's backward (AC), then freed
  double work = 0;       // gradients of activations alive at once inside the block's backward
};

GpuBlockBytes gpu_block_bytes(const JobShape& job) {
  const Widths w(job.model);
  const double t = double(job.degrees.tp), d = double(w.d), hd = double(w.hd), kv = double(w.kv), f = double(w.f);
  const double kva = double(w.kv_attended()), H = double(w.heads);
  double none = 0;
  if (job.compile) {
    // Compiled blocks save about what ctitan's fused kernels do: each norm its rstd and output
    // (the matmuls' all-gathered input), the attention inputs and output, the residual, the FFN's
    // three hidden-width tensors.
    none = 2 * (4 / t + 2 * d) + (2 * hd + 4 * kva) / t + (2 * hd + 4 * H) / t + 2 * 2 * d / t + 3 * 2 * f / t;
  } else {
    // Eager: RMSNorm saves x in fp32, rstd, the normalized x (bf16) for the weight's product, and
    // its output (all-gathered for the matmuls); RoPE saves q and k as fp32 complex numbers and
    // writes bf16 copies; repeat_kv (GQA) copies k and v to the heads' width; SDPA saves q, k,
    // v, output, logsumexp; SiLU saves w1's output, the product saves SiLU's and w3's, w2 saves
    // the product.
    none = 2 * ((4 * d + 4 + 2 * d) / t + 2 * d) + (4 * hd + 2 * hd) / t + (4 * kv + 2 * kva) / t + 2 * kva / t +
           (2 * hd + 4 * H) / t + 8 * f / t;
  }
  GpuBlockBytes b;
  switch (job.ac) {
    case ActivationCheckpoint::kNone:
      b.saved = none;
      break;
    case ActivationCheckpoint::kFull:
      b.saved = 2 * d / t;  // the block's input only
      break;
    case ActivationCheckpoint::kSelectiveOp:
      // torchtitan's op policy: the block input, the outputs of SDPA and of the reduce-scatters,
      // and of every other matmul (1st wq, 3rd wv, 5th w1, 7th w2: w2's before its reduce-scatter,
      // whole-sequence). (Float8 matmuls are `_scaled_mm`, outside the list, yet the published
      // float8 runs' memory equals bf16's: we count them as saved too.)
      b.saved = 2 * d / t + (2 * hd + 4 * H) / t + (t > 1 ? 2 * 2 * d / t : 0) + 2 * hd / t + 2 * kv / t +
                2 * f / t + 2 * d;
      break;
  }
  b.recompute = std::max(0.0, none - b.saved);
  // The residual gradient and, in the FFN's backward, three hidden-width gradients at once.
  b.work = 2 * d / t + 3 * 2 * f / t;
  return b;
}

class TorchtitanGpuWalk {
 public:
  TorchtitanGpuWalk(const JobShape& job, int64_t pp_rank, Ledger& ledger)
      : job_(job), w_(job.model), rank_(pp_rank), L_(ledger) {
    const auto& g = job.degrees;
    t_ = double(g.tp);
    dp_ = double(g.dp_shard);
    v_ = stages_per_rank(job);
    m_ = pp_microbatches(job);
    n_ = double(job.local_batch_size) / double(m_) * double(job.seq_len);  // tokens per microbatch
    const auto layers = stage_layers(w_.layers, g.pp * v_);
    for (int64_t s = 0; s < v_; ++s) {
      const int64_t stage = rank_ + s * g.pp;
      stage_layers_.push_back(layers[size_t(stage)]);
      if (stage == 0) first_ = true;
      if (stage + 1 == g.pp * v_) last_ = true;
    }
    block_ = gpu_block_bytes(job);
    const double lin = double(numel(block_weights(w_), /*linear_only=*/true)) / t_;
    blk_numel_ = lin + 2 * double(w_.d);  // the norms are replicated over TP
    // Gathered bytes: float8 linears are all-gathered in float8 (1 byte), the rest in bf16.
    blk_gathered_ = lin * (job.float8 ? 1 : 2) + 2 * 2 * double(w_.d);
    root_numel_ = (first_ ? double(w_.vocab * w_.d) / t_ : 0) +
                  (last_ ? double(w_.vocab * w_.d) / t_ + double(w_.d) : 0);
    for (auto l : stage_layers_) rank_layers_ += l;
    rank_numel_ = double(rank_layers_) * blk_numel_ + root_numel_;
  }

  double state_numel() const { return rank_numel_ / dp_; }

  void run() {
    L_.at("start of step");
    // fp32 master shards and AdamW's two moments; FSDP's padding is not counted here.
    L_.add(kParams, bytes(4 * rank_numel_ / dp_));
    L_.add(kOptim, bytes(8 * rank_numel_ / dp_));
    // RoPE's complex table (torchtitan: 2 * max_seq_len positions, complex64).
    L_.add(kOther, bytes(2.0 * double(std::max(job_.model.max_seq_len, job_.seq_len)) * double(job_.model.head_dim() / 2) * 8));
    if (job_.degrees.pp > 1) pipelined();
    else unpipelined();
  }

 private:
  int64_t bytes(double b) const { return int64_t(std::llround(b)); }
  double loss_vocab() const { return double(w_.vocab) / t_; }  // loss parallel: the vocab shard
  // Cross-entropy of the fp32 logits, fp32 bytes per vocab element alive at its peaks, beyond
  // log_softmax's saved output (4) and the bf16 logits (2, until train.py deletes them). PyTorch's
  // kernels: forward the fp32 copy (4); backward nll's dense gradient and log_softmax's (8).
  // Loss parallel (TP) is DTensor's decomposition (torch/distributed/tensor/parallel/loss.py):
  // forward the copy, x - max and exp(x - max) (12); backward the zeros, exp(x) and two products
  // (12).
  double loss_forward_extra() const { return t_ > 1 ? 12 : 4; }
  double loss_backward_extra() const { return t_ > 1 ? 12 : 8; }

  // The final norm in eager ops (torchtitan compiles blocks only): fp32 x, rstd, normalized x,
  // and its output all-gathered for the output matmul.
  double final_norm_saved() const { return n_ * ((4 * double(w_.d) + 4 + 2 * double(w_.d)) / t_ + 2 * double(w_.d)); }

  // Without PP. Under FSDP (dp_shard > 1): bf16 parameters gathered per block, bf16 gradients
  // reduce-scattered in fp32 block by block. Otherwise (one GPU, DDP) torchtitan trains fp32
  // weights under bf16 autocast, whose cast cache holds a bf16 copy of every matmul weight until
  // the forward ends, and autograd keeps them until each block's backward (an upper bound
  // under AC, which frees them earlier); gradients are fp32; DDP adds fp32 buckets.
  void unpipelined() {
    const double n = n_, L = double(rank_layers_), V = loss_vocab(), d = double(w_.d);
    const double out_numel = double(w_.vocab * w_.d) / t_;
    const bool fsdp = job_.degrees.dp_shard > 1;
    const double block_copies = 2 * (blk_numel_ - 2 * d);  // a block's bf16 matmul weights
    if (!fsdp && job_.degrees.dp_replicate > 1) L_.add(kComm, bytes(4 * rank_numel_));  // DDP's buckets
    // With gradient accumulation the earlier microbatches' sharded gradients are there already.
    const bool accumulated = job_.grad_accum_steps > 1;
    if (accumulated) L_.add(kGrads, bytes(4 * rank_numel_ / dp_));
    L_.at("forward: loss");
    L_.add(kActs, bytes(L * block_.saved * n + final_norm_saved()));
    // FSDP: the last block stays gathered after forward. Autocast: every bf16 copy.
    L_.add(kParams, bytes(fsdp ? blk_gathered_ : L * block_copies + 2 * out_numel));
    // The logits (bf16) and log_softmax's fp32 output, with the loss's temporaries; the logits
    // are freed when train.py deletes them before backward.
    L_.add(kActs, bytes((6 + loss_forward_extra()) * V * n));
    L_.free(kActs, bytes((2 + loss_forward_extra()) * V * n));
    L_.at("backward: loss");
    L_.add(kActs, bytes(loss_backward_extra() * V * n));
    // Freed: the saved output and the temporaries; left: the gradient of the fp32 logits.
    L_.free(kActs, bytes(loss_backward_extra() * V * n));
    L_.at("backward: output");
    if (fsdp) L_.add(kParams, bytes(2 * root_numel_));  // the root group, gathered again for backward
    L_.add(kActs, bytes(2 * V * n));                    // the gradient cast back to the logits' bf16
    L_.free(kActs, bytes(4 * V * n));
    L_.add(kActs, bytes(2 * d * n));                    // the output matmul's input gradient (whole sequence)
    // output's gradient: FSDP's unsharded bf16 one, reduced at the end; else fp32 in .grad.
    if (!accumulated || fsdp) L_.add(kGrads, bytes((fsdp ? 2 : 4) * out_numel));
    if (!fsdp) L_.free(kParams, bytes(2 * out_numel));
    L_.free(kActs, bytes(2 * V * n));
    L_.at("backward: norm");
    L_.add(kActs, bytes(2 * d / t_ * n));               // the residual gradient
    L_.free(kActs, bytes(2 * d * n + final_norm_saved()));
    for (int64_t i = rank_layers_ - 1; i >= 0; --i) {
      L_.at(fmt::format("backward: layers.{}", i));
      // FSDP: this block gathered (the last one still is) and the one below prefetched (its
      // all-gather output). Then the block's activations recomputed and its backward's
      // gradients; its weight gradients, bf16 unsharded (FSDP) or fp32.
      const double gathered = fsdp ? blk_gathered_ : 0;
      if (i + 1 < rank_layers_) L_.add(kParams, bytes(gathered));
      L_.add(kComm, bytes(gathered));
      L_.add(kActs, bytes((block_.recompute + block_.work) * n));
      if (!accumulated || fsdp) L_.add(kGrads, bytes((fsdp ? 2 : 4) * blk_numel_));
      L_.free(kActs, bytes((block_.recompute + block_.work + block_.saved) * n));
      L_.free(kComm, bytes(gathered));
      L_.free(kParams, bytes(fsdp ? gathered : block_copies));
      if (!fsdp) continue;
      // Reduce-scatter in fp32: its cast input is held until it completes (one in flight); the
      // output is the sharded fp32 gradient (added into the accumulated one).
      L_.add(kComm, bytes(4 * blk_numel_));
      L_.free(kGrads, bytes(2 * blk_numel_));
      if (!accumulated) L_.add(kGrads, bytes(4 * blk_numel_ / dp_));
      if (held_reduce_ > 0) L_.free(kComm, bytes(held_reduce_));
      held_reduce_ = 4 * blk_numel_;
    }
    L_.at("backward: tok_embeddings");
    const double emb_grad = first_ ? out_numel : 0;
    if (!accumulated || fsdp) L_.add(kGrads, bytes((fsdp ? 2 : 4) * emb_grad));
    L_.free(kActs, bytes(2 * d / t_ * n));
    if (fsdp) {
      L_.add(kComm, bytes(4 * root_numel_));  // the root's fp32 reduce-scatter input
      L_.free(kGrads, bytes(2 * (out_numel + emb_grad)));
      L_.free(kParams, bytes(2 * root_numel_));
      if (!accumulated) L_.add(kGrads, bytes(4 * root_numel_ / dp_));
    }
    L_.at("optimizer step");
    if (fsdp) L_.free(kComm, bytes(held_reduce_ + 4 * root_numel_));
    // foreach AdamW: a temporary the size of the second moments (their square root).
    L_.add(kOptim, bytes(4 * rank_numel_ / dp_));
  }

  // One op of a pipeline schedule on this rank: forward or backward of (local stage, microbatch).
  struct PipeOp {
    bool forward;
    int64_t stage, microbatch;
  };

  // torch.distributed.pipelining's orders. 1F1B: min(m, p - r) forwards, then backward and
  // forward alternating, then the remaining backwards. Interleaved 1F1B: (v-1)p + 2(p-1-r)
  // forwards (at most all), then forward and backward alternating; forward k runs local stage
  // (k / p) mod v, backward k the stages in reverse.
  std::vector<PipeOp> schedule() const {
    const int64_t p = job_.degrees.pp, m = m_, total = m * v_;
    auto op = [&](bool fwd, int64_t k) {
      int64_t s = (k / p) % v_;
      if (!fwd) s = v_ - 1 - s;
      return PipeOp{fwd, s, (k / (p * v_)) * p + k % p};
    };
    int64_t warmup = v_ == 1 ? std::min(m, p - rank_) : std::min(total, (v_ - 1) * p + 2 * (p - 1 - rank_));
    std::vector<PipeOp> ops;
    int64_t f = 0, b = 0;
    for (; f < warmup; ++f) ops.push_back(op(true, f));
    while (f < total || b < total) {
      if (v_ == 1) {  // 1B1F
        if (b < total) ops.push_back(op(false, b++));
        if (f < total) ops.push_back(op(true, f++));
      } else {        // 1F1B
        if (f < total) ops.push_back(op(true, f++));
        if (b < total) ops.push_back(op(false, b++));
      }
    }
    return ops;
  }

  void pipelined() {
    const double n = n_, V = loss_vocab();
    // Without resharding after forward (torchtitan under PP), every block of this rank and the
    // root's pieces stay gathered for the whole step.
    L_.add(kParams, bytes(double(rank_layers_) * blk_gathered_ + 2 * root_numel_));
    std::vector<bool> has_grads(size_t(v_), false);
    const int64_t last_stage = job_.degrees.pp * v_ - 1;
    for (const auto& op : schedule()) {
      const int64_t stage = rank_ + op.stage * job_.degrees.pp;
      const double layers = double(stage_layers_[size_t(op.stage)]);
      const bool loss = stage == last_stage;
      const double saved = layers * block_.saved * n + (loss ? final_norm_saved() + 6 * V * n : 0);
      if (op.forward) {
        L_.at(fmt::format("forward: stage {} microbatch {}", stage, op.microbatch));
        // The stage's saved activations; the last stage keeps the logits (the schedule holds the
        // stage output for backward) and log_softmax's fp32 output.
        L_.add(kActs, bytes(saved));
        if (loss) {
          L_.add(kActs, bytes(loss_forward_extra() * V * n));
          L_.free(kActs, bytes(loss_forward_extra() * V * n));
        }
        continue;
      }
      L_.at(fmt::format("backward: stage {} microbatch {}", stage, op.microbatch));
      if (loss) {
        L_.add(kActs, bytes(loss_backward_extra() * V * n));
        L_.free(kActs, bytes(loss_backward_extra() * V * n));
      }
      L_.add(kActs, bytes((block_.recompute + block_.work) * n));
      // Gradients are accumulated unsharded, in fp32 (FSDP2 without gradient sync upcasts to
      // the reduce dtype), until the last microbatch's backward reduces them.
      if (!has_grads[size_t(op.stage)]) {
        has_grads[size_t(op.stage)] = true;
        L_.add(kGrads, bytes(4 * (layers * blk_numel_ + (loss ? double(w_.vocab * w_.d) / t_ : 0) +
                                  (stage == 0 ? double(w_.vocab * w_.d) / t_ : 0))));
      }
      L_.free(kActs, bytes((block_.recompute + block_.work) * n + saved));
    }
    L_.at("optimizer step");
  }

  const JobShape& job_;
  Widths w_;
  int64_t rank_;
  Ledger& L_;
  double t_ = 1, dp_ = 1, n_ = 0;
  int64_t v_ = 1, m_ = 1;
  std::vector<int64_t> stage_layers_;
  bool first_ = false, last_ = false;
  GpuBlockBytes block_;
  double blk_numel_ = 0, blk_gathered_ = 0, root_numel_ = 0, rank_numel_ = 0, held_reduce_ = 0;
  int64_t rank_layers_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------------------

// Device-memory bytes the element-wise work of one block's forward moves per token (before TP
// sharding): each op reads its inputs and writes its output once. Backward moves about twice
// that (saved inputs and the incoming gradient in, a gradient out); recomputation once more.
double elementwise_forward_bytes(const JobShape& job, bool fused) {
  const Widths w(job.model);
  const double d = double(w.d), hd = double(w.hd), kv = double(w.kv), f = double(w.f);
  const double repeat = w.gqa ? 2 * (2 * kv + 2 * hd) : 0;  // repeat_kv copies k and v
  const double residual_adds = 2 * 3 * 2 * d;               // two adds: two bf16 inputs, one output
  if (fused) {
    // One pass per kernel: each norm reads x and writes its output, RoPE reads and writes q and
    // k, SwiGLU reads two hidden tensors and writes one (ctitan's fused kernels, or inductor's).
    return 2 * (2 * d + 2 * d) + 2 * (hd + kv) * 2 + repeat + residual_adds + 3 * 2 * f;
  }
  // Eager: RMSNorm is x.float(), pow, mean, rsqrt, mul, type_as, mul by the weight (about 36
  // bytes per element); RoPE casts q and k to fp32, multiplies as complex and casts back (20);
  // SiLU then the product (10 per hidden element).
  return 2 * 36 * d + 20 * (hd + kv) + repeat + residual_adds + 10 * f;
}

// Float8 (torchao, dynamic scaling) casts every activation and gradient that enters a float8
// matmul: an amax pass (read bf16) and the cast (read bf16, write float8), 5 bytes per element.
// Per token per block: wq, wk, wv each cast the attention_norm output, wo the attention output,
// w1, w3 the ffn_norm output, w2 the SwiGLU output; in backward, the gradients of the seven outputs.
double float8_cast_bytes(const JobShape& job, bool recompute) {
  if (!job.float8) return 0;
  const Widths w(job.model);
  const double d = double(w.d), hd = double(w.hd), kv = double(w.kv), f = double(w.f);
  const double inputs = 3 * d + hd + 2 * d + f, grads = hd + 2 * kv + d + 2 * f + d;
  return 5 * (inputs * (recompute ? 2 : 1) + grads);
}

struct LayerCost {
  double bf16_flops = 0, fp8_flops = 0, hbm_bytes = 0;  // per token, whole layer (before TP)
};

LayerCost layer_cost(const JobShape& job, bool fused) {
  const Widths w(job.model);
  const double lin = double(numel(block_weights(w), /*linear_only=*/true));
  const double T = double(job.seq_len);
  double recompute_lin = 0, recompute_attn = 0;
  bool recompute_any = job.ac != ActivationCheckpoint::kNone;
  if (job.ac == ActivationCheckpoint::kFull) {
    recompute_lin = lin;
    recompute_attn = 1;
  } else if (job.ac == ActivationCheckpoint::kSelectiveOp) {
    // The 2nd, 4th and 6th matmuls (wk, wo, w3) are recomputed; SDPA is saved.
    recompute_lin = double(w.kv * w.d + w.d * w.hd + w.f * w.d);
  }
  LayerCost c;
  const double matmul = 6 * lin + 2 * recompute_lin;
  (job.float8 ? c.fp8_flops : c.bf16_flops) += matmul;
  // Attention as the causal kernel computes it: half of torchtitan's 12 * hd * T (forward 2,
  // backward 4), plus a forward again under full AC.
  c.bf16_flops += 6 * double(w.hd) * T + recompute_attn * 2 * double(w.hd) * T;
  c.hbm_bytes = elementwise_forward_bytes(job, fused) * (3 + (recompute_any ? 1 : 0)) +
                float8_cast_bytes(job, recompute_any);
  return c;
}

double collective_bandwidth(const HardwareProfile& hw, int64_t span) {
  return span <= hw.devices_per_node ? hw.intra_node_bytes_per_s : hw.inter_node_bytes_per_s;
}

}  // namespace

JobShape job_shape_from_config(const config::JobConfig& config, const models::llama::ModelArgs& model,
                               int64_t world_size) {
  JobShape job;
  job.model = model;
  const auto& t = config.training;
  const auto& p = config.parallelism;
  job.local_batch_size = t.local_batch_size;
  job.seq_len = t.seq_len;
  job.degrees.dp_replicate = p.data_parallel_replicate_degree;
  job.degrees.tp = p.tensor_parallel_degree;
  job.degrees.dp_shard = p.data_parallel_shard_degree;
  if (job.degrees.dp_shard == -1) {
    job.degrees.dp_shard = std::max<int64_t>(1, world_size / (job.degrees.dp_replicate * job.degrees.tp));
  }
  const int64_t dp = job.degrees.dp_replicate * job.degrees.dp_shard;
  const int64_t global = t.global_batch_size > 0 ? t.global_batch_size : t.local_batch_size * dp;
  if (global % (t.local_batch_size * dp) != 0) {
    throw ConfigError(fmt::format("training.global_batch_size {} is not divisible by local_batch_size {} x dp degree {}",
                                  global, t.local_batch_size, dp));
  }
  job.grad_accum_steps = global / (t.local_batch_size * dp);
  job.bf16 = t.mixed_precision_param == c10::kBFloat16;
  job.reduce_bf16 = t.mixed_precision_reduce == c10::kBFloat16;
  job.reshard_after_forward = p.fsdp_reshard_after_forward;
  job.gradient_sync = p.fsdp_gradient_sync;
  return job;
}

void validate_job(const JobShape& job, const HardwareProfile& hw) {
  const auto& g = job.degrees;
  const auto& m = job.model;
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw InputError(message, 2);
  };
  require(g.dp_replicate >= 1 && g.dp_shard >= 1 && g.tp >= 1 && g.pp >= 1,
          fmt::format("--dp-replicate, --dp-shard, --tp and --pp must be >= 1 (got {}, {}, {}, {})", g.dp_replicate,
                      g.dp_shard, g.tp, g.pp));
  require(job.local_batch_size >= 1 && job.seq_len >= 1 && job.grad_accum_steps >= 1,
          "training.local_batch_size and training.seq_len must be >= 1");
  require(m.n_heads % g.tp == 0, fmt::format("--tp {} does not divide model.n_heads {}", g.tp, m.n_heads));
  require(m.kv_heads() % g.tp == 0, fmt::format("--tp {} does not divide model.n_kv_heads {}", g.tp, m.kv_heads()));
  require(m.ffn_hidden_dim() % g.tp == 0,
          fmt::format("--tp {} does not divide the FFN hidden size {}", g.tp, m.ffn_hidden_dim()));
  require(m.vocab_size % g.tp == 0, fmt::format("--tp {} does not divide model.vocab_size {}", g.tp, m.vocab_size));
  require(job.seq_len % g.tp == 0,
          fmt::format("training.seq_len {} is not a multiple of --tp {} (sequence parallel)", job.seq_len, g.tp));
  if (g.pp > 1) {
    const int64_t stages = g.pp * stages_per_rank(job), mb = pp_microbatches(job);
    require(m.n_layers >= stages,
            fmt::format("--pp {} with {} gives {} stages, more than model.n_layers {}", g.pp,
                        job.pp_schedule == PipelineSchedule::k1F1B ? "1F1B" : "Interleaved1F1B", stages, m.n_layers));
    require(mb >= g.pp, fmt::format("--pp-microbatches {} is fewer than the {} pipeline ranks: the schedule would hang", mb, g.pp));
    require(job.local_batch_size % mb == 0,
            fmt::format("training.local_batch_size {} is not divisible by --pp-microbatches {}", job.local_batch_size, mb));
  }
  require(hw.peak_flops > 0 && hw.memory_bytes > 0 && hw.memory_bytes_per_s > 0 && hw.intra_node_bytes_per_s > 0 &&
              hw.inter_node_bytes_per_s > 0 && hw.achievable_fraction > 0 && hw.devices_per_node >= 1,
          "--hardware: memory, peak FLOP/s, bandwidths and --gpus-per-node must all be positive");
  if (!hw.is_gpu) {
    // ctitan on a CPU: what it can run, nothing else.
    require(g.tp == 1 && g.pp == 1, "--tp and --pp: the CPU walk follows ctitan's step without TP (built, not modelled here) or PP (not built); estimate them with a GPU --hardware");
    require(job.ac == ActivationCheckpoint::kNone && !job.float8 && !job.compile && !job.async_tp,
            "--ac, --float8, --compile and --async-tp model torchtitan on a GPU; the CPU walk follows ctitan's step "
            "without activation checkpointing (ctitan's block checkpointing is not modelled yet), float8 or compile");
  } else {
    require(job.bf16, "training.mixed_precision_param float32: the GPU model is of torchtitan's bf16 training only");
    require(!job.async_tp || job.compile, "--async-tp needs --compile (as torchtitan)");
    require(job.grad_accum_steps == 1 || g.pp == 1,
            "training.global_batch_size: gradient accumulation with --pp is not modelled");
  }
}

MemoryEstimate estimate_memory(const JobShape& job, const HardwareProfile& hw) {
  auto with_state = [](MemoryEstimate m, double numel) {
    m.state_params_bytes = int64_t(std::llround(4 * numel));
    m.state_grads_bytes = int64_t(std::llround(4 * numel));
    m.state_optimizer_bytes = int64_t(std::llround(8 * numel));
    return m;
  };
  if (!hw.is_gpu) {
    Ledger ledger;
    CtitanCpuWalk walk(job, ledger);
    walk.run();
    return with_state(ledger.result(), double(walk.state_numel()));
  }
  MemoryEstimate worst;
  for (int64_t rank = 0; rank < job.degrees.pp; ++rank) {
    Ledger ledger;
    TorchtitanGpuWalk walk(job, rank, ledger);
    walk.run();
    if (ledger.peak() > worst.peak_bytes) {
      worst = with_state(ledger.result(), walk.state_numel());
      worst.pipeline_rank = rank;
    }
  }
  return worst;
}

ThroughputEstimate estimate_throughput(const JobShape& job, const HardwareProfile& hw) {
  const Widths w(job.model);
  const auto& g = job.degrees;
  const double t = double(g.tp), p = double(g.pp), dp = double(g.dp_shard), R = double(g.dp_replicate);
  const int64_t v = stages_per_rank(job), m = pp_microbatches(job);
  const double seq = double(job.seq_len);
  // Tokens a dp rank processes per optimizer step, and per microbatch.
  const double step_tokens = double(job.local_batch_size) * seq * double(job.grad_accum_steps);
  const double mb_tokens = double(job.local_batch_size) / double(m) * seq;
  const bool fused = !hw.is_gpu || job.compile;

  ThroughputEstimate out;
  out.flops_per_token = models::llama::flops_per_token(job.model, job.seq_len);
  const LayerCost layer = layer_cost(job, fused);
  const double V = double(w.vocab), d = double(w.d);
  const double output_flops = 6 * V * d;       // bf16: torchtitan's float8 conversion skips `output`
  // The loss per logit: ctitan's fused cross-entropy reads the logits twice and writes dlogits;
  // torchtitan's eager fp32 one moves about 40 bytes (the cast, log_softmax, nll, their backward).
  const double loss_bytes = hw.is_gpu ? 40 * V : 3 * (job.bf16 ? 2 : 4) * V;
  out.executed_flops_per_token = double(w.layers) * (layer.bf16_flops + layer.fp8_flops) + output_flops;

  const double flops_rate = hw.peak_flops * hw.achievable_fraction;
  const double fp8_rate = flops_rate * hw.float8_speedup;
  // Seconds one GPU spends per token on one layer / on the output layer and loss (TP splits
  // matmuls and element-wise work alike).
  const double layer_matmul_s = (layer.bf16_flops / flops_rate + layer.fp8_flops / fp8_rate) / t;
  const double layer_elementwise_s = layer.hbm_bytes / hw.memory_bytes_per_s / t;
  const double head_matmul_s = output_flops / flops_rate / t;
  const double head_elementwise_s = loss_bytes / hw.memory_bytes_per_s / t;

  // The slowest pipeline rank sets the pace.
  const auto layers = stage_layers(w.layers, g.pp * v);
  double worst_layers = 0;
  for (int64_t r = 0; r < g.pp; ++r) {
    double n = 0;
    for (int64_t s = 0; s < v; ++s) n += double(layers[size_t(r + s * g.pp)]);
    worst_layers = std::max(worst_layers, n);
  }
  out.matmul_seconds = step_tokens * (worst_layers * layer_matmul_s + head_matmul_s);
  out.elementwise_seconds = step_tokens * (worst_layers * layer_elementwise_s + head_elementwise_s);
  const double compute = out.matmul_seconds + out.elementwise_seconds;

  // FSDP (or DDP): parameters all-gathered in forward and again in backward (once per step
  // under PP, which does not reshard), gradients reduce-scattered in the reduce dtype. They run
  // beside compute; what cannot hide is the first gather and the last reduction, and any excess
  // of traffic over compute.
  const double lin = double(numel(block_weights(w), /*linear_only=*/true)) / t;
  const double blk_numel = lin + 2 * d;
  const double blk_gathered = hw.is_gpu ? lin * (job.float8 ? 1 : 2) + 4 * d : blk_numel * (job.bf16 ? 2 : 4);
  const double root_numel = 2 * V * d / t + d;
  const double rank_numel = worst_layers * blk_numel + root_numel;
  const double reduce_bytes = job.reduce_bf16 ? 2 : 4;
  const double microbatches = double(job.grad_accum_steps);
  double fsdp_s = 0, edge_s = 0;
  if (g.dp_shard > 1) {
    const double share = (dp - 1) / dp;
    const double gathers = g.pp > 1 ? 1 : 2 * microbatches;
    const double gathered = worst_layers * blk_gathered + root_numel * (job.bf16 || hw.is_gpu ? 2 : 4);
    const bool sync_each = g.pp == 1 && job.gradient_sync == config::GradientSync::kEveryMicrobatch;
    const double reductions = sync_each ? microbatches : 1;
    const double bytes = share * (gathered * gathers + rank_numel * reduce_bytes * reductions);
    const double bw = collective_bandwidth(hw, g.dp_shard * g.tp);
    out.fsdp_bytes = bytes;
    fsdp_s = bytes / bw;
    edge_s = share * (blk_gathered + blk_numel * reduce_bytes) / bw;
  }
  if (g.dp_replicate > 1) {
    // DDP's (or HSDP's replica) all-reduce of fp32 gradients: 2 (R - 1) / R of them, once a step.
    const double grads = g.dp_shard > 1 ? rank_numel / dp : rank_numel;
    const double bytes = 2 * (R - 1) / R * grads * 4;
    const double bw = collective_bandwidth(hw, g.dp_replicate * g.dp_shard * g.tp);
    out.fsdp_bytes += bytes;
    fsdp_s += bytes / bw;
    edge_s += std::min(grads * 4, 25e6 * 4) * 2 * (R - 1) / R / bw;  // the last bucket, after backward
  }
  out.fsdp_exposed_seconds = std::max(0.0, fsdp_s - compute) + edge_s;

  // TP with sequence parallel: per block, all-gathers before the attention and the FFN and
  // reduce-scatters after them, each moving (t - 1) / t of a (tokens, dim) tensor; backward
  // swaps them; recomputation repeats forward's (only the all-gathers under selective AC, whose
  // reduce-scatter outputs are saved). Float8 gathers its inputs in float8.
  if (g.tp > 1) {
    const double unit = (t - 1) / t * d;  // elements per token per collective
    const double ag = job.float8 ? 1 : 2;
    double per_layer = unit * (2 * ag + 2 * 2) + unit * 4 * 2;
    if (job.ac == ActivationCheckpoint::kFull) per_layer += unit * (2 * ag + 2 * 2);
    if (job.ac == ActivationCheckpoint::kSelectiveOp) per_layer += unit * 2 * ag;
    const double bytes = step_tokens * (worst_layers * per_layer + 2 * unit * 2 * 2);  // + embedding, output
    out.tp_bytes = bytes;
    const double tp_s = bytes / collective_bandwidth(hw, g.tp);
    // Async TP overlaps each collective with the matmul beside it.
    out.tp_exposed_seconds = job.async_tp ? std::max(0.0, tp_s - out.matmul_seconds) : tp_s;
  }

  // PP: each microbatch's activations go to the next stage and their gradients come back, a
  // (tokens, dim / t) bf16 tensor each way per stage boundary; the bubble is the schedule's fill
  // and drain: (p - 1) of (v m + p - 1) slots, v the stages per rank.
  if (g.pp > 1) {
    const double bytes = 2 * double(m * v) * mb_tokens * d / t * 2;
    out.pp_bytes = bytes;
    out.pp_p2p_seconds = bytes / collective_bandwidth(hw, g.world());
    out.bubble_seconds = (compute + out.pp_p2p_seconds) * (p - 1) / double(v * m);
  }
  out.step_seconds = compute + out.fsdp_exposed_seconds + out.tp_exposed_seconds + out.pp_p2p_seconds + out.bubble_seconds;
  out.tokens_per_second_per_gpu = step_tokens / out.step_seconds / (t * p);
  out.mfu_pct = 100 * out.flops_per_token * out.tokens_per_second_per_gpu / hw.peak_flops;
  return out;
}

JobEstimate estimate_job(const JobShape& job, const HardwareProfile& hw) {
  validate_job(job, hw);
  JobEstimate e;
  e.memory = estimate_memory(job, hw);
  e.throughput = estimate_throughput(job, hw);
  e.capacity_bytes = hw.memory_bytes;
  e.fits = e.memory.peak_bytes <= e.capacity_bytes;
  return e;
}

}  // namespace ctitan::metrics
