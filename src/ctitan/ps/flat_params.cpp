#include "ctitan/ps/flat_params.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"

namespace ctitan::ps {

int64_t total_numel(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

torch::Tensor flatten(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> pieces;
  pieces.reserve(tensors.size());
  for (const auto& t : tensors) pieces.push_back(t.detach().to(torch::kFloat).reshape({-1}));
  return torch::cat(pieces).cpu();
}

torch::Tensor flatten_grads(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  return flatten(grads);
}

void unflatten_into(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors, const std::string& from) {
  const int64_t expected = total_numel(tensors);
  if (flat.dim() != 1 || flat.numel() != expected) {
    throw InputError(fmt::format("ps: {} sent {} parameter values, this model has {}: every process must build "
                                 "the same model (same [model] config)", from, flat.numel(), expected));
  }
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.copy_(flat.slice(0, offset, offset + t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

void assign_grads(const torch::Tensor& flat, const std::vector<torch::Tensor>& params) {
  int64_t offset = 0;
  for (const auto& p : params) {
    p.mutable_grad() = flat.slice(0, offset, offset + p.numel()).view(p.sizes());
    offset += p.numel();
  }
}

}  // namespace ctitan::ps
