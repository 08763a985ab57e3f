#include "ctitan/train/loss.h"

namespace ctitan::train {

torch::Tensor summed_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels) {
  auto vocab = logits.size(-1);
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, vocab}).to(torch::kFloat), labels.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(kIgnoreIndex));
}

torch::Tensor count_valid_tokens(const torch::Tensor& labels) { return (labels != kIgnoreIndex).sum(); }

}  // namespace ctitan::train
