#pragma once
// The block attention context parallelism is built from: one block's forward and backward with
// its log-sum-exp, through which blocks merge exactly (which blocks: load_balance.h's plan_block).
#include <torch/torch.h>

#include <tuple>
#include <utility>

namespace ctitan::parallel::cp {

// (B, T, H_kv, D) -> (B, H, T, D): GQA's heads repeated, heads before tokens for the kernels.
torch::Tensor heads_first(const torch::Tensor& x, int64_t n_rep);
// (B, H, T, D) -> (B, T, H_kv, D): the repeated heads' gradients summed back onto their kv head.
torch::Tensor heads_back(const torch::Tensor& g, int64_t n_rep);

// Which kernels compute a block: kAuto takes PyTorch's flash kernel (the one SDPA runs) on the
// CPU, and plain ops elsewhere (CUDA) or with CTITAN_DISABLE_FUSED=attention; kPlainOps always
// the plain ops (O(Tq x Tk) memory), which the tests hold against the flash kernel.
enum class BlockKernel { kAuto, kPlainOps };

// One block's attention: out (B, H, Tq, D) fp32 and its log-sum-exp (B, H, Tq) fp32 (natural
// log of the sum of exp(scaled scores)). q, k, v: (B, H, T, D) in the compute dtype.
std::pair<torch::Tensor, torch::Tensor> block_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v, bool causal, double scale,
                                                      BlockKernel kernel = BlockKernel::kAuto);

// Merges a block's (out, lse) into the running (out, lse) of the rows it covers, in place: the
// softmax over the union of the keys seen so far. All fp32; `out` (B, H, Tq, D), `lse` (B, H, Tq).
void merge_block(torch::Tensor out, torch::Tensor lse, const torch::Tensor& block_out, const torch::Tensor& block_lse);

// The gradients (dq, dk, dv), fp32, of one block given the merged (whole-sequence) output and
// log-sum-exp of its query rows: with those, the block's probabilities are its share of the
// global softmax, so the flash backward's results are the block's exact contributions.
// dout, out: the compute dtype, (B, H, Tq, D).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> block_backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                       const torch::Tensor& k, const torch::Tensor& v,
                                                                       const torch::Tensor& out,
                                                                       const torch::Tensor& lse, bool causal,
                                                                       double scale,
                                                                       BlockKernel kernel = BlockKernel::kAuto);

}  // namespace ctitan::parallel::cp
