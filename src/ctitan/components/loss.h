#pragma once
#include <torch/torch.h>

#include "ctitan/ops/cross_entropy.h"

namespace ctitan::components {

constexpr int64_t kIgnoreIndex = -100;

// Summed (not averaged) cross-entropy over the valid labels, in fp32 whatever the logits' dtype.
// logits: (B, T, V), labels: (B, T). The caller divides by the valid-token count of the whole
// global batch, which makes k microbatches add up to exactly one k-times-larger batch.
// `after`: kDiscarded when the caller drops its logits once the loss exists (the trainer does),
// so backward reuses their buffer for the gradient (ops/cross_entropy.h).
torch::Tensor summed_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                   ops::LogitsAfterLoss after = ops::LogitsAfterLoss::kKept);

// Number of labels that are not kIgnoreIndex, as a 0-d int64 tensor.
torch::Tensor count_valid_tokens(const torch::Tensor& labels);

}  // namespace ctitan::components
