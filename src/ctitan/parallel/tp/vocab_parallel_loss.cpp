#include "ctitan/parallel/tp/vocab_parallel_loss.h"

#include <limits>

#include "ctitan/ops/cross_entropy.h"
#include "ctitan/parallel/tp/group_handle.h"

namespace ctitan::parallel::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& labels,
                               int64_t vocab_offset, int64_t ignore_index, int64_t handle) {
    auto& group = group_from_handle(handle);
    torch::NoGradGuard no_grad;
    const int64_t columns = logits.size(1);
    auto row_max = ops::row_max(logits);  // (N,) over this rank's columns, then over the group's
    group.all_reduce(row_max, distributed::ReduceOp::kMax);
    auto valid = labels != ignore_index;                                                // (N,)
    auto owned = valid & (labels >= vocab_offset) & (labels < vocab_offset + columns);  // (N,)
    auto local_label = torch::where(owned, labels - vocab_offset, torch::full_like(labels, -1));
    // (2, N): this rank's share of sum(exp(x - max)) and of the target logit.
    auto sums = torch::zeros({2, logits.size(0)}, row_max.options());
    sums[0] = ops::row_sum_exp(logits, row_max);
    if (columns > 0) {
      sums[1] = logits.gather(1, local_label.clamp_min(0).unsqueeze(1)).squeeze(1).to(torch::kFloat).masked_fill(~owned, 0.0);
    }
    group.all_reduce(sums, distributed::ReduceOp::kSum);
    auto lse = sums[0].log() + row_max;  // (N,)
    auto loss = (lse - sums[1]).masked_fill(~valid, 0.0).to(torch::kDouble).sum().to(torch::kFloat);
    ctx->save_for_backward({logits, lse, local_label, valid});
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    // (N,): the loss's gradient for valid rows, 0 for ignored ones.
    auto row_scale = saved[3].to(torch::kFloat) * grads[0].to(torch::kFloat);
    auto grad = ops::softmax_minus_onehot(saved[0], saved[1], saved[2], row_scale);  // (N, V_r)
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels,
                                               int64_t vocab_offset, int64_t ignore_index,
                                               distributed::Communicator& group) {
  TORCH_CHECK(logits.dim() == 2 && labels.dim() == 1 && logits.size(0) == labels.size(0),
              "vocab_parallel_cross_entropy_sum: logits (N, V_r) and labels (N)");
  return VocabParallelCrossEntropy::apply(logits, labels, vocab_offset, ignore_index, group_handle(group));
}

}  // namespace ctitan::parallel::tp
