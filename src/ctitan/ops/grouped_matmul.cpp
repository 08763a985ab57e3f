#include "ctitan/ops/grouped_matmul.h"

#include "ctitan/ops/fusion_switch.h"

namespace ctitan::ops {
namespace {

torch::Tensor per_group(const torch::Tensor& x, const torch::Tensor& w, const std::vector<int64_t>& counts) {
  std::vector<torch::Tensor> outs;
  // One unbind and one split, not w[e] and x.narrow per expert: each select's or slice's
  // backward writes a zero gradient of the whole tensor and adds it up, E times per matmul
  // (measured: a third of the MoE step on the CPU); unbind's and split's backwards write each
  // gradient once (zeros for experts without tokens).
  const auto experts = w.unbind(0);
  const auto rows = x.split_with_sizes(counts);
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;  // an expert without tokens: no matmul, a zero gradient slice
    outs.push_back(torch::matmul(rows[e], experts[e].t()));  // (n_e, out)
  }
  // No rows at all (expert parallelism can send a rank none): an empty product that still
  // depends on x and w, so that autograd reaches them with (zero) gradients.
  if (outs.empty()) return torch::matmul(x, experts[0].t());
  return outs.size() == 1 ? outs.front() : torch::cat(outs);
}

}  // namespace

torch::Tensor grouped_matmul_fused(const torch::Tensor& x, const torch::Tensor& w, const std::vector<int64_t>& counts) {
  std::vector<int32_t> ends(counts.size());
  int64_t end = 0;
  for (size_t e = 0; e < counts.size(); ++e) ends[e] = int32_t(end += counts[e]);
  auto offsets = torch::tensor(ends, torch::kInt).to(x.device(), /*non_blocking=*/true);  // (E,) cumulative ends
  return at::_grouped_mm(x, w.transpose(-2, -1), offsets);
}

torch::Tensor grouped_matmul(const torch::Tensor& x, const torch::Tensor& w, const std::vector<int64_t>& counts) {
  int64_t rows = 0;
  for (auto c : counts) rows += c;
  TORCH_CHECK(x.dim() == 2 && w.dim() == 3 && w.size(0) == int64_t(counts.size()) && w.size(2) == x.size(1) &&
                  rows == x.size(0),
              "grouped_matmul: x (N, in) and w (E, out, in) with E counts summing to N");
  // No rows (an expert-parallel rank sent none): the per-group path, whose empty product is sure.
  if (x.is_cuda() && x.size(0) > 0 && fused_enabled("grouped_mm")) return grouped_matmul_fused(x, w, counts);
  return per_group(x, w, counts);
}

}  // namespace ctitan::ops
