#pragma once
// What a collective must produce, computed by each rank for every other rank without talking to
// them: deterministic inputs per (rank, salt), the reduction over ranks in float64, and
// comparisons that name the first differing element.
#include <fmt/format.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "ctitan/distributed/collective_backend.h"

namespace ctitan::distributed::testref {

// Sizes 1, 7, 1001 and one for which the full buffer (n, or N * n when `buffers_per_n` = N for
// all_gather and reduce_scatter, whose big side is N * n) is ~4 MB. All odd, so that no size is
// a multiple of a vector width.
inline std::vector<int64_t> sizes_for(torch::ScalarType dtype, int64_t buffers_per_n = 1) {
  int64_t big = (int64_t(4) << 20) / int64_t(c10::elementSize(dtype)) / buffers_per_n;
  return {1, 7, 1001, big | 1};
}

// Elements [start, start + n) of rank r's input for reductions: integers in [-14, 14], exact in
// every dtype, and so are their sums over up to 18 ranks (bf16 holds integers exactly up to 256):
// SUM and MAX are compared exactly; only AVG rounds.
inline torch::Tensor small_ints(int rank, int64_t n, torch::ScalarType dtype, int salt, int64_t start = 0) {
  auto i = torch::arange(start, start + n, torch::kLong);  // int64: N * n may exceed int32 / 11
  return ((i * 11 + rank * 37 + salt * 5) % 29 - 14).to(dtype);
}

// Rank r's input for pure moves (gather, broadcast): busy mantissas, compared bit for bit.
inline torch::Tensor busy_bits(int rank, int64_t n, torch::ScalarType dtype, int salt) {
  if (torch::isFloatingType(dtype)) {
    return ((torch::arange(n, torch::kDouble) * 0.37 + rank * 1.3 + salt).sin() * 100).to(dtype);
  }
  return ((torch::arange(n, torch::kLong) * 7919 + rank * 104729 + salt * 31) % 2000003 - 1000001).to(dtype);
}

// AVG is rounded once in fp32 (Gloo divides there) and once into the dtype: twice the unit
// roundoff of the dtype bounds the relative error.
inline double avg_rtol(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16: return 1.0 / 128;
    case torch::kHalf: return 1.0 / 1024;
    case torch::kFloat: return 1.2e-7;
    default: return 2.3e-16;
  }
}

inline torch::Tensor reduce_reference(const std::vector<torch::Tensor>& per_rank, ReduceOp op) {
  auto stacked = torch::stack(per_rank).to(torch::kDouble);
  if (op == ReduceOp::kMax) return std::get<0>(stacked.max(0));
  auto sum = stacked.sum(0);
  return op == ReduceOp::kAvg ? sum / double(per_rank.size()) : sum;
}

// nullopt when equal within rtol (0: exactly); else "first mismatch at index i: got g, expected e".
inline std::optional<std::string> mismatch(const torch::Tensor& got, const torch::Tensor& expected, double rtol) {
  auto g = got.reshape({-1}).to(torch::kDouble), e = expected.reshape({-1}).to(torch::kDouble);
  if (g.numel() != e.numel()) return fmt::format("{} elements, expected {}", g.numel(), e.numel());
  auto bad = rtol == 0 ? g.ne(e) : (g - e).abs().gt(e.abs() * rtol);
  if (!bad.any().item<bool>()) return std::nullopt;
  int64_t i = bad.nonzero()[0][0].item<int64_t>();
  return fmt::format("first mismatch at index {}: got {}, expected {}", i, g[i].item<double>(), e[i].item<double>());
}

// The same, comparing the bits (a move must not round, flush denormals or canonicalize NaNs).
inline std::optional<std::string> bit_mismatch(const torch::Tensor& got, const torch::Tensor& expected) {
  auto as_bits = [](const torch::Tensor& t) {
    switch (c10::elementSize(t.scalar_type())) {
      case 2: return t.reshape({-1}).view(torch::kShort);
      case 4: return t.reshape({-1}).view(torch::kInt);
      default: return t.reshape({-1}).view(torch::kLong);
    }
  };
  return mismatch(as_bits(got), as_bits(expected), 0);
}

// One rank's record of its checks: the label and problem of each failed one.
class Failures {
 public:
  void expect(const std::string& label, const std::optional<std::string>& problem) {
    ++checks_;
    if (problem) text_ += label + ": " + *problem + "\n";
  }
  const std::string& text() const { return text_; }
  int checks() const { return checks_; }

 private:
  std::string text_;
  int checks_ = 0;
};

}  // namespace ctitan::distributed::testref
