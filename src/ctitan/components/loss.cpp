#include "ctitan/components/loss.h"

#include "ctitan/ops/cross_entropy.h"

namespace ctitan::components {

torch::Tensor summed_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                   ops::LogitsAfterLoss after) {
  auto vocab = logits.size(-1);
  return ops::cross_entropy_sum(logits.reshape({-1, vocab}), labels.reshape({-1}), kIgnoreIndex, after);
}

torch::Tensor count_valid_tokens(const torch::Tensor& labels) { return (labels != kIgnoreIndex).sum(); }

}  // namespace ctitan::components
