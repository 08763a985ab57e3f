// The GPU memory walk: torchtitan's step, block by block, counting live tensors (a caching
// allocator reserves more: fragmentation is not modelled).
//
// torchtitan's Llama 3 in PyTorch ops (or torch.compile'd blocks) under FSDP2 with bf16 params
// and fp32 reduction, TP with sequence parallel and loss parallel, PP with its schedules, and
// activation checkpointing per block. Sources (torchtitan 9dec370, the commit of the published
// H100 runs): parallelize_llama.py (the selective-op save list, FSDP groups: one per block, the
// last block not resharded after forward, the root holding embeddings, norm and output),
// pipeline_llama.py / pipelining_utils.py (stage splits, microbatches = stages), train.py (the
// loss: cross-entropy of the logits cast to fp32; the logits deleted before backward).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ctitan/estimate/job_shape.h"
#include "ctitan/estimate/walk.h"

namespace ctitan::estimate::detail {
namespace {

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
    // The norms (QK-norms too) are replicated over TP.
    blk_numel_ = lin + 2 * double(w_.d) + (w_.qk_norm ? 2 * double(w_.head_dim) : 0);
    // Gathered bytes: float8 linears are all-gathered in float8 (1 byte), the rest in bf16.
    blk_gathered_ = lin * (job.float8 ? 1 : 2) + 2 * (blk_numel_ - lin);
    // A tied head has no weight of its own (and no pipeline split: the trainer refuses it).
    root_numel_ = (first_ ? double(w_.vocab * w_.d) / t_ : 0) +
                  (last_ ? (w_.tied ? 0 : double(w_.vocab * w_.d) / t_) + double(w_.d) : 0);
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
    L_.add(kOther, bytes(2.0 * double(std::max(job_.model.max_seq_len, job_.seq_len)) * double(job_.model.rope_dim() / 2) * 8));
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
    // Tied: the embedding's gradient is added into the one the head's backward left (one tensor).
    const double emb_grad = first_ && !w_.tied ? out_numel : 0;
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

}  // namespace

WalkResult walk_torchtitan_gpu(const JobShape& job, int64_t pp_rank) {
  Ledger ledger;
  TorchtitanGpuWalk walk(job, pp_rank, ledger);
  walk.run();
  return {ledger.result(), walk.state_numel()};
}

}  // namespace ctitan::estimate::detail
