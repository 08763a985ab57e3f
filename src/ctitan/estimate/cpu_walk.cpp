// The CPU memory walk: ctitan's own step, tensor by tensor, so that its peak reproduces the
// counting allocator's `memory_peak_bytes`.
//
// Follows ParallelizedModel::forward_backward with the fused kernels of ops/ (what each autograd Function
// saves is in its forward), autocast's bf16 weight copies, parallel/fsdp and parallel/ddp. The
// autograd engine runs a node, releases what it saved and its incoming gradient, then runs the
// ready node created last in forward: a weight's AccumulateGrad (and autocast's cast back to fp32
// before it) right after its matmul. Left out: scalars, and scratch inside kernels (SDPA's
// per-thread blocks), tens of bytes to a few KB.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ctitan/estimate/job_shape.h"
#include "ctitan/estimate/walk.h"

namespace ctitan::estimate::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

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
    if (w_.tied) add_group("norm, output", {{w_.d, 1, false}});  // the head reads tok_embeddings' weight
    else add_group("norm, output", {{w_.d, 1, false}, {w_.vocab, w_.d, true}});
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
    L_.add(kOther, 2 * std::max(m.max_seq_len, job_.seq_len) * (m.rope_dim() / 2) * 4);
    // The global batch, loaded before the step: inputs and labels, int64, per microbatch.
    L_.add(kOther, job_.grad_accum_steps * 2 * n_ * 8);
    int64_t shard_numel = 0;
    for (const auto& g : groups_) shard_numel += g.shard;
    L_.add(kParams, 4 * shard_numel);  // fp32 master weights: FSDP's flat shards, or the whole model
    L_.add(kOptim, 8 * shard_numel);   // AdamW's exp_avg and exp_avg_sq, one fp32 each per element
    // DDP: one persistent fp32 flat buffer per bucket, together a copy of every parameter.
    if (ddp_) L_.add(kComm, 4 * shard_numel);
  }

  // --- FSDP group lifetimes (parallel/fsdp/fsdp_param_group.cpp) -----------------------------

  int64_t gathered_bytes(const Group& g) const { return shards_ * g.shard * c_; }
  // The all-gather is in place: the shard is cast into this rank's slot of the gathered buffer.
  void issue_gather(int64_t i) {
    if (!fsdp_ || i < 0 || i >= int64_t(groups_.size()) || unsharded_[i] || gathering_[i]) return;
    gathering_[i] = true;
    L_.add(kComm, gathered_bytes(groups_[i]));
  }
  // unshard_with_prefetch: issue this group's gather (unless prefetched), wait for it, give each
  // parameter its storage and copy out, drop the gathered buffer; only then issue the prefetch.
  void unshard(int64_t i, int64_t prefetch) {
    if (!fsdp_) return;
    issue_gather(i);
    if (!unsharded_[i]) {
      L_.add(kParams, groups_[i].unsharded * c_);
      L_.free(kComm, gathered_bytes(groups_[i]));
      gathering_[i] = false;
      unsharded_[i] = true;
    }
    issue_gather(prefetch);
  }
  void reshard(int64_t i) {
    if (!fsdp_ || !unsharded_[i]) return;
    L_.free(kParams, groups_[i].unsharded * c_);
    unsharded_[i] = false;
  }
  bool reshards_after_forward(int64_t i) const {
    using R = config::ReshardAfterForward;
    if (job_.reshard_after_forward == R::kNever) return false;
    // A tied head reads the embedding's weight at the end of forward and first thing in backward:
    // apply_fsdp keeps that group gathered.
    if (i == 0 && w_.tied) return false;
    return i + 1 < int64_t(groups_.size()) || job_.reshard_after_forward == R::kAlways;
  }

  // post-backward of group i: complete the reduction in flight, reshard, copy the group's
  // gradients into a reduce buffer and free them, start its reduce-scatter.
  void post_backward(int64_t i) {
    if (!fsdp_) return;
    const auto& g = groups_[i];
    L_.at(fmt::format("backward: {} reduce-scatter", g.name));
    finish_pending_reduce();
    reshard(i);
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
      L_.add(kComm, g.shard * rd_);             // this rank's reduced shard
      L_.add(kComm, shards_ * g.shard * rd_);  // Gloo's receive buffer (N chunks), held until wait()
      pending_ = i;
    }
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
    L_.free(kComm, 2 * shards_ * g.shard * rd_);  // the reduce-scatter's input and receive buffer, released by wait()
    // HSDP: the replicas then all-reduce the reduced shard; a bf16 one goes as an fp32 copy,
    // alive for that call.
    if (job_.degrees.dp_replicate > 1 && rd_ == 2) {
      L_.add(kComm, g.shard * 4);
      L_.free(kComm, g.shard * 4);
    }
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

  // bf16 SwiGLU takes the tensor ops (faster there, ops/swiglu.cpp); fp32 the fused kernel.
  bool swiglu_as_tensor_ops() const { return c_ == 2; }

  // What one block's fused kernels save for backward (the autograd Functions in ops/).
  int64_t block_saved_bytes() const {
    const int64_t d = w_.d;
    int64_t per_token = 0;
    per_token += 4 + d * c_;                              // attention_norm: rstd; output (saved by wq, wk, wv)
    if (w_.qk_norm) per_token += (w_.hd + w_.kv) * c_ + 4 * (w_.heads + w_.kv_heads);  // QK-norms: q, k as projected; rstd per head
    per_token += w_.hd * c_ + 2 * w_.kv_attended() * c_;  // SDPA's inputs: q, k after RoPE; v (k, v repeated under GQA)
    per_token += w_.hd * c_ + 4 * w_.heads;               // SDPA's output (also wo's input), logsumexp fp32
    per_token += d * r_;                                  // h = x + attention: ffn_norm's input
    per_token += 4 + d * c_;                              // ffn_norm: rstd; output (saved by w1, w3)
    per_token += 3 * w_.f * c_;                           // w1, w3 outputs (SwiGLU's a, b); SwiGLU's output (w2's input)
    if (swiglu_as_tensor_ops()) per_token += w_.f * c_;   // silu(a), saved by the product
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

  // RMSNormFn::backward of a QK-norm over (N * heads, head_dim), all in the compute dtype: dx
  // and the per-chunk partial sums of the weight gradient; then the release of the incoming
  // gradient, the saved x (the projection's output) and rstd.
  void head_norm_backward(int64_t heads) {
    const int64_t rows = n_ * heads, D = w_.head_dim, weight_grad = D * (fsdp_ ? c_ : 4);
    L_.add(kActs, rows * D * c_ + ceil_div(rows, 64) * D * 4);
    L_.free(kActs, ceil_div(rows, 64) * D * 4);
    L_.add(kActs, weight_grad);
    accumulate(weight_grad);
    L_.free(kActs, 2 * rows * D * c_ + rows * 4);
  }

  void backward() {
    const int64_t N = n_, d = w_.d, V = w_.vocab;
    const int64_t last = int64_t(groups_.size()) - 1;
    L_.at("backward: cross-entropy");
    // dlogits is written over the saved logits (ops::LogitsAfterLoss::kDiscarded): no new buffer.
    L_.free(kActs, N * 4);  // the saved logsumexp
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
    if (w_.tied) L_.free(kActs, V * d * (fsdp_ ? c_ : 4));  // added into the .grad the head's backward left
    else accumulate(V * d * (fsdp_ ? c_ : 4));
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
    if (swiglu_as_tensor_ops()) {
      L_.add(kActs, 2 * N * f * c_);                   // the product's backward: d silu(a), db
      L_.free(kActs, 3 * N * f * c_);                  // saved silu(a), b; the incoming gradient
      L_.add(kActs, N * f * c_);                       // SiLU's backward: da
      L_.free(kActs, 2 * N * f * c_);                  // saved a; d silu(a)
    } else {
      L_.add(kActs, 2 * N * f * c_);                   // da, db
      L_.free(kActs, 3 * N * f * c_);                  // saved a, b; the incoming gradient
    }
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
    if (w_.qk_norm) head_norm_backward(w_.kv_heads);   // k_norm
    matmul_backward(ws[1], N * d, N * d * c_ + N * kv * c_);  // wk; summed into wv's
    L_.add(kActs, N * hd * c_);                        // RoPE's backward of dq
    L_.free(kActs, N * hd * c_);
    if (w_.qk_norm) head_norm_backward(w_.heads);      // q_norm
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

}  // namespace

WalkResult walk_ctitan_cpu(const JobShape& job) {
  Ledger ledger;
  CtitanCpuWalk walk(job, ledger);
  walk.run();
  return {ledger.result(), double(walk.state_numel())};
}

}  // namespace ctitan::estimate::detail
