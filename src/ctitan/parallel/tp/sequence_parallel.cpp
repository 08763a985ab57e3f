#include "ctitan/parallel/tp/sequence_parallel.h"

#include "ctitan/parallel/op_selective_checkpoint.h"
#include "ctitan/parallel/tp/group_handle.h"

namespace ctitan::parallel::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// (B, T/tp, ...) on every rank -> (B, T, ...).
torch::Tensor all_gather_dim1(const torch::Tensor& x, distributed::Communicator& group) {
  torch::NoGradGuard no_grad;
  auto local = x.contiguous();
  auto shape = local.sizes().vec();
  std::vector<int64_t> stacked_shape{group.size()};
  stacked_shape.insert(stacked_shape.end(), shape.begin(), shape.end());
  auto stacked = torch::empty(stacked_shape, local.options());  // (tp, B, T/tp, ...)
  group.all_gather_into_tensor(stacked, local);
  shape[1] *= group.size();
  return stacked.transpose(0, 1).reshape(shape);  // (B, tp, T/tp, ...) -> (B, T, ...)
}

// (B, T, ...) partial on every rank -> (B, T/tp, ...) summed.
torch::Tensor reduce_scatter_dim1(const torch::Tensor& x, distributed::Communicator& group) {
  torch::NoGradGuard no_grad;
  const int64_t tp = group.size();
  TORCH_CHECK(x.size(1) % tp == 0, "reduce_scatter_sequence: sequence ", x.size(1), " not divisible by ", tp);
  auto shape = x.sizes().vec();
  std::vector<int64_t> split_shape{shape[0], tp, shape[1] / tp};
  split_shape.insert(split_shape.end(), shape.begin() + 2, shape.end());
  auto chunks = x.reshape(split_shape).transpose(0, 1).contiguous();  // (tp, B, T/tp, ...): rank r's rows r-th
  shape[1] /= tp;
  auto out = torch::empty(shape, x.options());
  group.reduce_scatter_tensor(out, chunks, distributed::ReduceOp::kSum);
  return out;
}

struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return all_gather_dim1(x, group_of(ctx));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {reduce_scatter_dim1(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    // An expensive op for op selective AC: its recompute takes the first forward's output back
    // instead of communicating again (op_selective_checkpoint.h); elsewhere a plain call.
    return saved_op("tp::reduce_scatter_sequence", [&] { return reduce_scatter_dim1(x, group_of(ctx)); });
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_gather_dim1(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

struct GatherVocab : torch::autograd::Function<GatherVocab> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group, int64_t vocab,
                               int64_t shard) {
    ctx->saved_data["group"] = group;
    auto& g = group_of(ctx);
    ctx->saved_data["local"] = x.size(-1);
    ctx->saved_data["shard"] = shard;
    torch::NoGradGuard no_grad;
    // Uneven shards travel padded to `shard` columns: (..., shard) per rank.
    auto padded = torch::constant_pad_nd(x, {0, shard - x.size(-1)}).contiguous();
    auto lead = padded.sizes().vec();
    lead.pop_back();
    std::vector<int64_t> stacked_shape{g.size()};
    stacked_shape.insert(stacked_shape.end(), lead.begin(), lead.end());
    stacked_shape.push_back(shard);
    auto stacked = torch::empty(stacked_shape, padded.options());  // (tp, ..., shard)
    g.all_gather_into_tensor(stacked, padded);
    return stacked.movedim(0, -2).flatten(-2).narrow(-1, 0, vocab).contiguous();  // (..., vocab)
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t begin = group_of(ctx).rank() * ctx->saved_data["shard"].toInt();
    auto grad = grads[0].narrow(-1, begin, ctx->saved_data["local"].toInt());
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor gather_sequence(const torch::Tensor& x, distributed::Communicator& group) {
  return GatherSequence::apply(x, group_handle(group));
}

torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, distributed::Communicator& group) {
  return ReduceScatterSequence::apply(x, group_handle(group));
}

torch::Tensor gather_vocab(const torch::Tensor& x, distributed::Communicator& group, int64_t vocab, int64_t shard) {
  return GatherVocab::apply(x, group_handle(group), vocab, shard);
}

}  // namespace ctitan::parallel::tp
