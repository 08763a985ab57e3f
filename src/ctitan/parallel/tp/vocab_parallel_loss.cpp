#include "ctitan/parallel/tp/vocab_parallel_loss.h"

#include <limits>

namespace ctitan::parallel::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& labels,
                               int64_t vocab_offset, int64_t ignore_index, int64_t group_handle) {
    auto& group = *reinterpret_cast<distributed::Communicator*>(group_handle);
    torch::NoGradGuard no_grad;
    const int64_t rows = logits.size(0), columns = logits.size(1);
    auto x = logits.to(torch::kFloat);  // (N, V_r)
    // (N,): the row max over the whole vocabulary; a rank without columns contributes -inf.
    auto row_max = columns > 0 ? std::get<0>(x.max(1))
                               : torch::full({rows}, -std::numeric_limits<float>::infinity(), x.options());
    group.all_reduce(row_max, distributed::ReduceOp::kMax);
    auto valid = labels != ignore_index;                                             // (N,)
    auto owned = valid & (labels >= vocab_offset) & (labels < vocab_offset + columns);  // (N,)
    auto local_label = torch::where(owned, labels - vocab_offset, torch::zeros_like(labels));
    // (2, N): this rank's share of sum(exp(x - max)) and of the target logit.
    auto sums = torch::zeros({2, rows}, x.options());
    if (columns > 0) {
      sums[0] = (x - row_max.unsqueeze(1)).exp().sum(1);
      sums[1] = x.gather(1, local_label.unsqueeze(1)).squeeze(1).masked_fill(~owned, 0.0);
    }
    group.all_reduce(sums, distributed::ReduceOp::kSum);
    auto lse = sums[0].log() + row_max;  // (N,)
    auto loss = (lse - sums[1]).masked_fill(~valid, 0.0).sum();
    ctx->save_for_backward({logits, lse, local_label, owned, valid});
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& logits = saved[0];
    const auto &lse = saved[1], &local_label = saved[2], &owned = saved[3], &valid = saved[4];
    // (N, V_r): softmax on this rank's columns, minus one at the label where this rank owns it.
    auto grad = (logits.to(torch::kFloat) - lse.unsqueeze(1)).exp() * valid.unsqueeze(1).to(torch::kFloat);
    if (grad.size(1) > 0) grad.scatter_add_(1, local_label.unsqueeze(1), -owned.unsqueeze(1).to(torch::kFloat));
    grad = (grad * grads[0]).to(logits.scalar_type());
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels,
                                               int64_t vocab_offset, int64_t ignore_index,
                                               distributed::Communicator& group) {
  TORCH_CHECK(logits.dim() == 2 && labels.dim() == 1 && logits.size(0) == labels.size(0),
              "vocab_parallel_cross_entropy_sum: logits (N, V_r) and labels (N)");
  return VocabParallelCrossEntropy::apply(logits, labels, vocab_offset, ignore_index,
                                          reinterpret_cast<int64_t>(&group));
}

}  // namespace ctitan::parallel::tp
