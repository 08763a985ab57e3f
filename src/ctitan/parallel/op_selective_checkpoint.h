#pragma once
// Operator-level selective activation checkpointing (activation_checkpoint.selective_ac_option =
// "op"), torchtitan's op SAC: a block is checkpointed as in activation_checkpoint.h (it keeps its
// input and runs its forward again in backward), but its first forward also keeps the outputs of
// the expensive ops, and the recomputation takes those back instead of computing them again. Cheap
// ops (RMSNorm, RoPE, SiLU*mul, residual adds, views, casts, the TP all-gather) are recomputed.
//
// What is kept, as torchtitan's _op_sac_save_list and its every-other-mm policy:
//   aten::mm                       odd-numbered matmuls of the block (1st, 3rd, 5th, 7th: wq, wv,
//                                  w1, w2); the even ones (wk, wo, w3) are recomputed, as
//                                  torchtitan does to halve what the matmuls keep. (With async
//                                  TP each projection is several matmuls on sequence chunks;
//                                  the same policy counts those.)
//   SDPA kernels                   every output, e.g. the CPU flash kernel's (output, logsumexp)
//   tp reduce_scatter_sequence     its output (torchtitan keeps reduce_scatter_tensor's)
// The TP all-gather (gather_sequence) is recomputed, as torchtitan recomputes all_gather_into_tensor:
// its output is tp times its input, which the recomputed norm reproduces anyway; the cost is one
// all-gather per attention and feed-forward in backward, as with full AC.
//
// How, without TorchDispatchMode. PyTorch's op SAC is a dispatch mode: Python code that the
// dispatcher calls for every op *below autograd*, so autograd records each op's own node (MmBackward
// saving its inputs, the SDPA node saving q, k, v, output and logsumexp) while the mode decides
// where the output comes from. libtorch has the same place in C++: a kernel on a dispatch key
// that sits below Autograd and Autocast, switched on for a thread by adding the key to the
// thread-local included set (what pushing a mode does). The key is c10's CustomRNGKeyId, the one
// functionality key below autograd that libtorch leaves to out-of-tree code and registers nothing
// on (Python, Fake, Functionalize, ... all have fallbacks). On it: a fallthrough for every op, and
// a boxed kernel for the kept ops, registered on first use. Inside a checkpointed block the kernel
//   first forward (no grad):  runs the op below the key and appends its outputs to the call's
//                             cache (a FIFO per block call);
//   recompute (grad):         pops them instead of running the op. Autograd above has already
//                             recorded the op's own node on the recomputed inputs, so backward is
//                             the op's own backward: no hand-written grad_input/grad_weight and no
//                             extra copy of the inputs.
// The model knows nothing of this: linears and attention are plain libtorch calls. The one seam is
// saved_op() below, for ctitan's own collectives, which are not dispatcher ops.
//
// Equality: in fp32 losses and gradients equal mode = "none" bitwise. The kept outputs are the
// first forward's own tensors (equal to none's: same op, same inputs); every other op runs again on
// bit-equal inputs, as full AC relies on; and backward runs the same autograd nodes, in the same
// order (the checkpoint's nested backward), on bit-equal saved tensors. The replay checks that it
// sees the ops in the order recorded (name and input shapes) and that no kept output was modified
// in place since, and throws otherwise: a divergent recompute is an error, never a silent mismatch.
//
// FSDP: as with full AC, the checkpoint wraps the block's forward inside FSDP's hooks. The first
// forward runs on the gathered parameters, which FSDP frees after it; the cache holds outputs only,
// never parameters, so nothing keeps the gathered storage alive. The recompute runs after FSDP's
// pre-backward gather; the replayed matmuls do not read the weights, but their autograd nodes save
// the weight views, which point into that gathered storage, and FSDP frees it after the block's
// gradients are reduced, as without checkpointing. No extra gather. DDP: as full AC.
// TP: the cached reduce-scatter outputs are taken back on every tp rank alike (the policy is the
// same code on each), so the ranks skip the same collectives and issue the rest in the same order.
#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "ctitan/models/common/module_hooks.h"

namespace ctitan::parallel {

// One op-SAC checkpointed call of `forward` on `input` (the same restrictions on the region as
// checkpointed() in activation_checkpoint.h). Without grad mode or an input needing grad, a plain
// call: nothing is kept or recomputed.
torch::Tensor op_selective_checkpointed(const torch::Tensor& input, const models::ModuleHooks::Forward& forward);

// The seam for an expensive op the dispatcher does not see (ctitan's tp collectives): inside an
// op-SAC block's first forward, returns compute() and keeps it; in the recompute, returns the kept
// tensor without calling compute(); anywhere else, compute(). `name` identifies the op in the
// replay check. The caller's autograd node (e.g. the collective's Function) is recorded as usual.
torch::Tensor saved_op(const char* name, const std::function<torch::Tensor()>& compute);

// Ops this thread has kept (first forwards), taken back (recomputes) and run again although the
// policy saw them (the even matmuls), since the thread started: for tests and logs.
struct OpSacCounts {
  int64_t saved = 0, replayed = 0, recomputed = 0;
};
OpSacCounts op_sac_counts();

}  // namespace ctitan::parallel
