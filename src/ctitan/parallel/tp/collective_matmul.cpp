#include "ctitan/parallel/tp/collective_matmul.h"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <memory>

#include "ctitan/parallel/tp/group_handle.h"

namespace ctitan::parallel::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using WorkList = std::vector<std::shared_ptr<distributed::Work>>;

struct Chunk {
  int64_t begin = 0, size = 0;
};

// The shard's rows [0, local_len) in at most kSequenceChunks pieces whose sizes differ by at most
// one; the same on every rank (every rank has the same local_len).
std::vector<Chunk> sequence_chunks(int64_t local_len) {
  const int64_t n = std::max<int64_t>(1, std::min(kSequenceChunks, local_len));
  std::vector<Chunk> chunks;
  for (int64_t j = 0, begin = 0; j < n; ++j) {
    const int64_t size = local_len / n + (j < local_len % n ? 1 : 0);
    chunks.push_back({begin, size});
    begin += size;
  }
  return chunks;
}

void wait_all(WorkList& works) {
  for (auto& w : works) w->wait();
  works.clear();
}

// Issues the all-gather of every chunk of `local` (B, L, ...) along dim 1 at once: returns one
// (tp, B, c_j, ...) buffer per chunk, each filled once works[j] has completed.
std::vector<torch::Tensor> gather_chunks(const torch::Tensor& local, const std::vector<Chunk>& chunks,
                                         distributed::Communicator& group, WorkList& works) {
  std::vector<torch::Tensor> stacked;
  for (const auto& c : chunks) {
    auto piece = local.narrow(1, c.begin, c.size).contiguous();  // (B, c, ...)
    auto shape = piece.sizes().vec();
    shape.insert(shape.begin(), group.size());
    auto buffer = torch::empty(shape, piece.options());  // (tp, B, c, ...)
    works.push_back(group.all_gather_into_tensor(buffer, piece, /*async_op=*/true));
    stacked.push_back(buffer);
  }
  return stacked;
}

// (tp, B, c, N) rows of chunk `c` from every rank -> their places in `full` viewed (B, tp, L, N).
void place_rows(torch::Tensor& full4, const Chunk& c, const torch::Tensor& stacked) {
  full4.narrow(2, c.begin, c.size).copy_(stacked.transpose(0, 1));
}

struct AllGatherMatmul : torch::autograd::Function<AllGatherMatmul> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList weights, int64_t group) {
    ctx->saved_data["group"] = group;
    auto& g = group_of(ctx);
    const int64_t tp = g.size(), B = x.size(0), L = x.size(1), D = x.size(2);
    auto local = x.contiguous();
    const auto chunks = sequence_chunks(L);
    WorkList works;
    auto stacked = gather_chunks(local, chunks, g, works);
    auto x_full = torch::empty({B, tp * L, D}, local.options());
    auto x_full4 = x_full.view({B, tp, L, D});
    std::vector<torch::Tensor> ys, ys4;
    for (const auto& w : weights) {
      ys.push_back(torch::empty({B, tp * L, w.size(0)}, local.options()));
      ys4.push_back(ys.back().view({B, tp, L, w.size(0)}));
    }
    for (size_t j = 0; j < chunks.size(); ++j) {
      works[j]->wait();  // chunk j is here; the later chunks' gathers are still in flight
      place_rows(x_full4, chunks[j], stacked[j]);
      for (size_t i = 0; i < weights.size(); ++i) {
        place_rows(ys4[i], chunks[j], torch::matmul(stacked[j], weights[i].t()));  // (tp, B, c, out_i)
      }
    }
    works.clear();
    variable_list to_save{x_full};
    to_save.insert(to_save.end(), weights.begin(), weights.end());
    ctx->save_for_backward(to_save);
    variable_list outputs{x_full};
    outputs.insert(outputs.end(), ys.begin(), ys.end());
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto& g = group_of(ctx);
    auto saved = ctx->get_saved_variables();
    const auto& x_full = saved[0];
    const int64_t tp = g.size(), B = x_full.size(0), L = x_full.size(1) / tp, D = x_full.size(2);
    const auto chunks = sequence_chunks(L);
    WorkList works;
    std::vector<torch::Tensor> sent, scattered;
    for (const auto& c : chunks) {
      torch::Tensor gx;  // (B, tp, c, D): the input gradient's rows of chunk c on every rank
      if (grads[0].defined()) gx = grads[0].reshape({B, tp, L, D}).narrow(2, c.begin, c.size);
      for (size_t i = 1; i < saved.size(); ++i) {
        if (!grads[i].defined()) continue;
        const auto& w = saved[i];  // (out_i, D)
        auto term = torch::matmul(grads[i].reshape({B, tp, L, w.size(0)}).narrow(2, c.begin, c.size), w);
        gx = gx.defined() ? gx + term : term;
      }
      if (!gx.defined()) gx = torch::zeros({B, tp, c.size, D}, x_full.options());
      sent.push_back(gx.transpose(0, 1).contiguous());  // (tp, B, c, D): rank r's rows r-th
      scattered.push_back(torch::empty({B, c.size, D}, x_full.options()));
      works.push_back(g.reduce_scatter_tensor(scattered.back(), sent.back(), distributed::ReduceOp::kSum,
                                              /*async_op=*/true));
    }
    // The weight gradients while the reduce-scatters are in flight.
    variable_list out{torch::Tensor()};
    const auto x2 = x_full.reshape({-1, D});  // (B*T, D)
    for (size_t i = 1; i < saved.size(); ++i) {
      out.push_back(grads[i].defined() ? torch::matmul(grads[i].reshape({-1, saved[i].size(0)}).t(), x2)
                                       : torch::Tensor());  // (out_i, D)
    }
    wait_all(works);
    out[0] = torch::cat(scattered, 1);  // (B, L, D)
    out.push_back(torch::Tensor());     // group
    return out;
  }
};

struct MatmulReduceScatter : torch::autograd::Function<MatmulReduceScatter> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& weight,
                               int64_t group) {
    ctx->saved_data["group"] = group;
    auto& g = group_of(ctx);
    const int64_t tp = g.size(), B = h.size(0), T = h.size(1), K = h.size(2);
    TORCH_CHECK(T % tp == 0, "matmul_reduce_scatter: sequence ", T, " not divisible by ", tp);
    const int64_t L = T / tp;
    auto h4 = h.reshape({B, tp, L, K});
    const auto chunks = sequence_chunks(L);
    WorkList works;
    std::vector<torch::Tensor> partial, scattered;
    for (const auto& c : chunks) {
      // (tp, B, c, K) @ (K, D) -> (tp, B, c, D): this rank's partial sums of every rank's rows.
      partial.push_back(torch::matmul(h4.narrow(2, c.begin, c.size).transpose(0, 1).contiguous(), weight.t()));
      scattered.push_back(torch::empty({B, c.size, weight.size(0)}, partial.back().options()));
      // In flight while the next chunk's matmul runs.
      works.push_back(g.reduce_scatter_tensor(scattered.back(), partial.back(), distributed::ReduceOp::kSum,
                                              /*async_op=*/true));
    }
    wait_all(works);
    ctx->save_for_backward({h, weight});
    return torch::cat(scattered, 1);  // (B, L, D)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto& g = group_of(ctx);
    auto saved = ctx->get_saved_variables();
    const auto &h = saved[0], &weight = saved[1];
    const int64_t tp = g.size(), B = h.size(0), T = h.size(1), K = h.size(2), D = weight.size(0), L = T / tp;
    const auto chunks = sequence_chunks(L);
    WorkList works;
    auto stacked = gather_chunks(grads[0].contiguous(), chunks, g, works);
    auto grad_h = torch::empty({B, T, K}, h.options());
    auto grad_h4 = grad_h.view({B, tp, L, K});
    auto g_full = torch::empty({B, T, D}, stacked[0].options());
    auto g_full4 = g_full.view({B, tp, L, D});
    for (size_t j = 0; j < chunks.size(); ++j) {
      works[j]->wait();
      place_rows(g_full4, chunks[j], stacked[j]);
      place_rows(grad_h4, chunks[j], torch::matmul(stacked[j], weight));  // (tp, B, c, K)
    }
    works.clear();
    auto grad_w = torch::matmul(g_full.reshape({-1, D}).t(), h.reshape({-1, K}));  // (D, K)
    return {grad_h, grad_w, torch::Tensor()};
  }
};

// Autocast's policy for a linear, applied before the fused call (which autocast cannot see into):
// inputs and weights in the autocast dtype, the weights' casts cached for the forward as a
// linear's are. The casts are recorded by autograd, so gradients reach the fp32 weights.
torch::Tensor autocast_input(const torch::Tensor& t) {
  const auto device = t.device().type();
  if (!at::autocast::is_autocast_enabled(device) || !t.is_floating_point()) return t;
  return at::autocast::cached_cast(at::autocast::get_autocast_dtype(device), t, device);
}

c10::DispatchKey autocast_key(const torch::Tensor& t) {
  return at::autocast::get_autocast_dispatch_key_from_device_type(t.device().type());
}

}  // namespace

std::vector<torch::Tensor> all_gather_matmul(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                             distributed::Communicator& group) {
  std::vector<torch::Tensor> cast_weights;
  for (const auto& w : weights) cast_weights.push_back(autocast_input(w));
  auto cast_x = autocast_input(x);  // gathering the cast input moves half the bytes in bf16
  c10::impl::ExcludeDispatchKeyGuard no_autocast(autocast_key(x));
  // As a TensorList, so autograd sees each weight as an input (a std::vector would be opaque).
  return AllGatherMatmul::apply(cast_x, at::TensorList(cast_weights), group_handle(group));
}

torch::Tensor matmul_reduce_scatter(const torch::Tensor& h, const torch::Tensor& weight,
                                    distributed::Communicator& group) {
  auto cast_h = autocast_input(h), cast_w = autocast_input(weight);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(autocast_key(h));
  return MatmulReduceScatter::apply(cast_h, cast_w, group_handle(group));
}

}  // namespace ctitan::parallel::tp
