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

// logits: (N, V) fp32 or bf16; labels: (N) integer. Rows whose label is ignore_index add 0.
// Returns sum over rows of (logsumexp(logits_row) - logits_row[label]) as a 0-d fp32 tensor.
torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index);

// torch's cross_entropy (fp32 math, reduction sum): the reference the tests compare to.
torch::Tensor cross_entropy_sum_reference(const torch::Tensor& logits, const torch::Tensor& labels,
                                          int64_t ignore_index);

}  // namespace ctitan::ops
