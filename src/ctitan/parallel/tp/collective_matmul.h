#pragma once
// Async tensor parallelism (parallelism.enable_async_tensor_parallel): the sequence-parallel
// collectives fused with the matmuls beside them and micro-pipelined on sequence chunks, so one
// chunk's collective is in flight while another chunk's matmul runs. torchtitan gets this from
// torch.compile, which rewrites all_gather + mm and mm + reduce_scatter into fused ops; ctitan
// runs the fused ops eagerly, called from the TP plan's hooks on the projections.
//
//   all_gather_matmul      x (B, T/tp, D) -> x_full (B, T, D) and x_full @ W_i^T for each W_i
//     forward   every chunk's all-gather is issued at once; chunk j's matmuls run as soon as its
//               gather completes, while the later chunks' gathers are in flight.
//     backward  grad_x = sum_i g_i @ W_i chunk by chunk, each chunk's reduce-scatter issued as
//               soon as it is computed; the weight gradients g_i^T @ x_full are computed while
//               the reduce-scatters are in flight (Megatron's overlap of the input gradient's
//               communication with the weight gradient).
//   matmul_reduce_scatter  h (B, T, K) -> (h @ W^T) summed over tp and scattered: (B, T/tp, D)
//     forward   chunk j's matmul, then its reduce-scatter, in flight while chunk j+1's matmul runs.
//     backward  the output gradient's chunks all-gathered (issued at once), grad_h computed
//               chunk by chunk as they arrive, then grad_W = g_full^T @ h.
//
// Chunk j of a sequence shard is rows [begin_j, begin_j + c_j) of every rank's T/tp rows, so
// its collective moves (tp, B, c_j, ...) and the rows land at r*T/tp + begin_j on rank r.
// Buffers are held by each collective's Work until its wait(), and every wait happens inside the
// call: nothing outlives it. The communicator counts only the seconds a caller was blocked
// (comm_stats.h), so the exposed communication reported is what the overlap did not hide.
// Results equal the synchronous plan up to fp32 rounding (chunked matmuls, and three input
// gradients summed in another order); tests/parallel/tp/async_tensor_parallel_test.cpp bounds it.
#include <torch/torch.h>

#include <vector>

#include "ctitan/distributed/communicator.h"

namespace ctitan::parallel::tp {

// Sequence chunks per fused call: two, so half of each collective can hide behind compute while
// each chunk's matmul stays large enough for the CPU GEMM to run near its peak; fewer when the
// shard is shorter.
inline constexpr int64_t kSequenceChunks = 2;

// x: (B, T/tp, D); weights W_i: (out_i, D), no bias. Returns {x_full (B, T, D), y_1 (B, T, out_1), ...}.
std::vector<torch::Tensor> all_gather_matmul(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                             distributed::Communicator& group);

// h: (B, T, K) this rank's partial input; weight (D, K), no bias. Returns (B, T/tp, D).
torch::Tensor matmul_reduce_scatter(const torch::Tensor& h, const torch::Tensor& weight,
                                    distributed::Communicator& group);

}  // namespace ctitan::parallel::tp
