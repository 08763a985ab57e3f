#pragma once
// Summed cross-entropy straight from (bf16 or fp32) logits, as one autograd Function.
//
// The tensor-op version converts the logits to fp32, stores fp32 log-probabilities for backward
// and builds the gradient in further fp32 passes: for the 134M model (vocab 32000, 2048 tokens)
// that is several 262 MB tensors per step. Here each row of logits is streamed once in fp32
// registers to its log-sum-exp; only that (one float per row) is kept, and backward rebuilds
// softmax - onehot row by row directly in the logits' dtype.
#include <torch/torch.h>

namespace ctitan::ops {

// Whether anything reads the logits after the loss. A trainer drops them once the loss is
// computed (kDiscarded): backward then writes the gradient over the saved logits instead of into
// a second (N, V) buffer, so the start of backward holds one logits-sized tensor, not two. For
// Llama 3's 128K vocabulary that buffer is the largest activation of the step. kKept (the
// default) never touches the caller's tensor.
enum class LogitsAfterLoss { kKept, kDiscarded };

// logits: (N, V) fp32 or bf16; labels: (N) integer. Rows whose label is ignore_index add 0.
// Returns sum over rows of (logsumexp(logits_row) - logits_row[label]) as a 0-d fp32 tensor.
torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index,
                                LogitsAfterLoss after = LogitsAfterLoss::kKept);

// The same kernels for a vocabulary split over ranks (tensor parallelism's loss parallel,
// parallel/tp/vocab_parallel_loss.h): each streams a row of this rank's (N, V_r) logits once in
// fp32 registers, so no fp32 copy of the logits is made, forward or backward. Tensor-op
// fallbacks for CUDA tensors and CTITAN_DISABLE_FUSED.
// (N,) fp32: each row's max (-inf for V_r = 0).
torch::Tensor row_max(const torch::Tensor& logits);
// (N,) fp32: sum_j exp(logits[i, j] - shift[i]).
torch::Tensor row_sum_exp(const torch::Tensor& logits, const torch::Tensor& shift);
// The gradient of a summed cross-entropy on this rank's columns, in the logits' dtype:
// row_scale[i] * (exp(logits[i, j] - lse[i]) - [j == local_label[i]]); local_label -1 where
// another rank owns the label, row_scale 0 for ignored rows.
torch::Tensor softmax_minus_onehot(const torch::Tensor& logits, const torch::Tensor& lse,
                                   const torch::Tensor& local_label, const torch::Tensor& row_scale);

// torch's cross_entropy (fp32 math, reduction sum): the reference the tests compare to.
torch::Tensor cross_entropy_sum_reference(const torch::Tensor& logits, const torch::Tensor& labels,
                                          int64_t ignore_index);

}  // namespace ctitan::ops
