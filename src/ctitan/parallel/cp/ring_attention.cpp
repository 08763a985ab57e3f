#include "ctitan/parallel/cp/ring_attention.h"

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "ctitan/ops/fusion_switch.h"

namespace ctitan::parallel::cp {
namespace {

using torch::indexing::Slice;

// Which of this rank's query rows attend to which rows of the keys it holds at one ring step.
// Rank r holds chunks r (head) and 2cp-1-r (tail); the keys of rank j hold chunks j and 2cp-1-j.
// j == r: the local causal block; j < r: every query sees j's head chunk, never its tail
// (2cp-1-j > 2cp-1-r); j > r: only the tail queries see anything, and they see both of j's chunks.
// Each step is therefore one unmasked block of half the local work, whatever j.
struct BlockPlan {
  Slice q_rows, k_rows;
  bool causal = false;
};

BlockPlan plan_block(int64_t rank, int64_t source, int64_t chunk) {
  if (source == rank) return {Slice(), Slice(), true};
  if (source < rank) return {Slice(), Slice(0, chunk), false};
  return {Slice(chunk, torch::indexing::None), Slice(), false};
}

// (B, T, H_kv, D) -> (B, H, T, D): GQA's heads repeated, heads before tokens for the kernels.
torch::Tensor heads_first(const torch::Tensor& x, int64_t n_rep) {
  auto y = x.transpose(1, 2);  // (B, H_kv, T, D)
  if (n_rep == 1) return y;
  auto B = y.size(0), H = y.size(1), T = y.size(2), D = y.size(3);
  return y.unsqueeze(2).expand({B, H, n_rep, T, D}).reshape({B, H * n_rep, T, D});
}

// (B, H, T, D) -> (B, T, H_kv, D): the repeated heads' gradients summed back onto their kv head.
torch::Tensor heads_back(const torch::Tensor& g, int64_t n_rep) {
  auto B = g.size(0), H = g.size(1), T = g.size(2), D = g.size(3);
  auto summed = n_rep == 1 ? g : g.view({B, H / n_rep, n_rep, T, D}).sum(2);
  return summed.transpose(1, 2);
}

bool use_flash(const torch::Tensor& q) { return ops::fused_for("attention", q); }

// (B, T, T') additive-free causal mask as booleans: query i sees key j <= i (square blocks only).
torch::Tensor causal_keep(int64_t Tq, int64_t Tk, const torch::Device& device) {
  return torch::ones({Tq, Tk}, torch::TensorOptions().dtype(torch::kBool).device(device)).tril();
}

// One block's attention: out (B, H, Tq, D) fp32 and its log-sum-exp (B, H, Tq) fp32. q, k, v:
// (B, H, T, D) in the compute dtype. On the CPU, PyTorch's flash kernel (the one SDPA runs) gives
// both; elsewhere, and with CTITAN_DISABLE_FUSED=attention, the same in plain ops.
std::pair<torch::Tensor, torch::Tensor> block_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v, bool causal, double scale) {
  if (use_flash(q)) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, std::nullopt, scale);
    return {out.to(torch::kFloat), lse.to(torch::kFloat)};
  }
  auto scores = torch::matmul(q.to(torch::kFloat), k.to(torch::kFloat).transpose(-2, -1)) * scale;  // (B, H, Tq, Tk)
  if (causal) {
    scores = scores.masked_fill(causal_keep(q.size(2), k.size(2), q.device()).logical_not(),
                                -std::numeric_limits<float>::infinity());
  }
  auto lse = scores.logsumexp(-1);  // (B, H, Tq)
  auto out = torch::matmul((scores - lse.unsqueeze(-1)).exp(), v.to(torch::kFloat));
  return {out, lse};
}

// The gradients of one block given the merged (whole-sequence) output and log-sum-exp of its
// query rows: with those, the block's softmax probabilities are its share of the global ones, so
// the flash backward's dq, dk, dv are the block's exact contributions. dout, out: compute dtype.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> block_backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                       const torch::Tensor& k, const torch::Tensor& v,
                                                                       const torch::Tensor& out,
                                                                       const torch::Tensor& lse, bool causal,
                                                                       double scale) {
  if (use_flash(q)) {
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, causal,
                                                                                  std::nullopt, scale);
    return {dq.to(torch::kFloat), dk.to(torch::kFloat), dv.to(torch::kFloat)};
  }
  auto qf = q.to(torch::kFloat), kf = k.to(torch::kFloat), vf = v.to(torch::kFloat);
  auto dof = dout.to(torch::kFloat);
  auto scores = torch::matmul(qf, kf.transpose(-2, -1)) * scale;  // (B, H, Tq, Tk)
  auto probs = (scores - lse.unsqueeze(-1)).exp();
  if (causal) probs = probs * causal_keep(q.size(2), k.size(2), q.device());
  auto dv = torch::matmul(probs.transpose(-2, -1), dof);                          // (B, H, Tk, D)
  auto dprobs = torch::matmul(dof, vf.transpose(-2, -1));                         // (B, H, Tq, Tk)
  auto row_dot = (dof * out.to(torch::kFloat)).sum(-1, /*keepdim=*/true);         // (B, H, Tq, 1)
  auto dscores = probs * (dprobs - row_dot) * scale;
  return {torch::matmul(dscores, kf), torch::matmul(dscores.transpose(-2, -1), qf), dv};
}

// One hop of the ring: `send` to the next rank, `recv` filled from the previous one. Even ranks
// send first, odd ranks receive first: on NCCL, where a pair's operations run in issue order,
// a ring of ranks that all posted their receive first would wait on each other.
class RingHop {
 public:
  RingHop(distributed::Communicator& group, const torch::Tensor& send, torch::Tensor recv, int tag) {
    const int rank = group.rank(), size = group.size();
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    if (rank % 2 == 0) {
      send_ = group.isend(send, next, tag);
      recv_ = group.irecv(std::move(recv), prev, tag);
    } else {
      recv_ = group.irecv(std::move(recv), prev, tag);
      send_ = group.isend(send, next, tag);
    }
  }
  void wait(RingTimes* times) {
    const auto start = std::chrono::steady_clock::now();
    recv_->wait();
    send_->wait();
    if (times) times->exposed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  std::shared_ptr<distributed::Work> send_, recv_;
};

// Tags: the keys and values of step s travel as 2s, their gradients as 2s + 1.
int kv_tag(int64_t step) { return int(2 * step); }
int grad_tag(int64_t step) { return int(2 * step + 1); }

class RingAttentionFn : public torch::autograd::Function<RingAttentionFn> {
 public:
  // q (B, Tl, H, D), k, v (B, Tl, H_kv, D) -> (B, Tl, H * D). `group` and `times` are pointers
  // carried as integers (autograd's saved data holds IValues): ContextParallel owns both for the
  // model's life, longer than any graph built through it.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t group_ptr, int64_t times_ptr) {
    auto& group = *reinterpret_cast<distributed::Communicator*>(group_ptr);
    auto* times = reinterpret_cast<RingTimes*>(times_ptr);
    const int64_t rank = group.rank(), cp = group.size();
    const int64_t B = q.size(0), Tl = q.size(1), H = q.size(2), D = q.size(3), n_rep = H / k.size(2);
    const int64_t chunk = Tl / 2;
    const double scale = 1.0 / std::sqrt(double(D));
    auto q_bh = q.transpose(1, 2);  // (B, H, Tl, D)
    // Keys and values travel as one message: (2, B, Tl, H_kv, D).
    auto held = torch::stack({k, v}).contiguous();
    auto out = torch::zeros({B, H, Tl, D}, q.options().dtype(torch::kFloat));
    auto lse = torch::full({B, H, Tl}, -std::numeric_limits<float>::infinity(), q.options().dtype(torch::kFloat));
    for (int64_t step = 0; step < cp; ++step) {
      const int64_t source = (rank - step + cp) % cp;
      std::optional<RingHop> hop;
      torch::Tensor incoming;
      if (step + 1 < cp) {  // the next keys travel while this block computes
        incoming = torch::empty_like(held);
        hop.emplace(group, held, incoming, kv_tag(step));
      }
      const auto plan = plan_block(rank, source, chunk);
      auto [block_out, block_lse] =
          block_forward(q_bh.index({Slice(), Slice(), plan.q_rows}), heads_first(held[0], n_rep).index({Slice(), Slice(), plan.k_rows}),
                        heads_first(held[1], n_rep).index({Slice(), Slice(), plan.k_rows}), plan.causal, scale);
      // Merge the block into the rows it covers: softmax over the union of the keys seen so far.
      auto rows_out = out.index({Slice(), Slice(), plan.q_rows});
      auto rows_lse = lse.index({Slice(), Slice(), plan.q_rows});
      auto merged_lse = torch::logaddexp(rows_lse, block_lse);
      rows_out.copy_(rows_out * (rows_lse - merged_lse).exp().unsqueeze(-1) +
                     block_out * (block_lse - merged_lse).exp().unsqueeze(-1));
      rows_lse.copy_(merged_lse);
      if (hop) {
        hop->wait(times);
        held = incoming;
      }
    }
    auto result = out.to(q.scalar_type());  // (B, H, Tl, D)
    ctx->save_for_backward({q, k, v, result, lse});
    ctx->saved_data["group"] = group_ptr;
    ctx->saved_data["times"] = times_ptr;
    return result.transpose(1, 2).reshape({B, Tl, H * D});
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    auto& group = *reinterpret_cast<distributed::Communicator*>(ctx->saved_data["group"].toInt());
    auto* times = reinterpret_cast<RingTimes*>(ctx->saved_data["times"].toInt());
    const int64_t rank = group.rank(), cp = group.size();
    const int64_t B = q.size(0), Tl = q.size(1), H = q.size(2), D = q.size(3), n_rep = H / k.size(2);
    const int64_t chunk = Tl / 2;
    const double scale = 1.0 / std::sqrt(double(D));
    auto dout = grads[0].view({B, Tl, H, D}).transpose(1, 2).to(q.scalar_type());  // (B, H, Tl, D)
    auto q_bh = q.transpose(1, 2);
    auto dq = torch::zeros({B, H, Tl, D}, q.options().dtype(torch::kFloat));
    auto held = torch::stack({k, v}).contiguous();  // the keys and values of `source`, as in forward
    // The gradients of the keys and values held travel one hop behind them, summed on the way,
    // fp32; after the last step each rank's own come home.
    torch::Tensor held_grad;
    std::optional<RingHop> grad_hop;
    torch::Tensor grad_incoming;
    for (int64_t step = 0; step < cp; ++step) {
      const int64_t source = (rank - step + cp) % cp;
      std::optional<RingHop> hop;
      torch::Tensor incoming;
      if (step + 1 < cp) {
        incoming = torch::empty_like(held);
        hop.emplace(group, held, incoming, kv_tag(step));
      }
      const auto plan = plan_block(rank, source, chunk);
      auto rows = [&](const torch::Tensor& t) { return t.index({Slice(), Slice(), plan.q_rows}); };
      auto keys = [&](const torch::Tensor& t) { return heads_first(t, n_rep).index({Slice(), Slice(), plan.k_rows}); };
      auto [dq_block, dk_block, dv_block] = block_backward(rows(dout), rows(q_bh), keys(held[0]), keys(held[1]),
                                                           rows(out), rows(lse), plan.causal, scale);
      rows(dq).add_(dq_block);
      // This step's contribution to `source`'s key and value gradients: (2, B, Tl, H_kv, D).
      auto contribution = torch::zeros(held.sizes(), held.options().dtype(torch::kFloat));
      contribution[0].index({Slice(), plan.k_rows}).copy_(heads_back(dk_block, n_rep));
      contribution[1].index({Slice(), plan.k_rows}).copy_(heads_back(dv_block, n_rep));
      if (grad_hop) {  // the previous rank's sum for `source` so far
        grad_hop->wait(times);
        contribution.add_(grad_incoming);
      }
      held_grad = contribution;
      grad_incoming = torch::empty_like(held_grad);
      grad_hop.emplace(group, held_grad, grad_incoming, grad_tag(step));
      if (hop) {
        hop->wait(times);
        held = incoming;
      }
    }
    grad_hop->wait(times);  // this rank's own key and value gradients, summed over every query rank
    auto dq_out = dq.transpose(1, 2).to(q.scalar_type());  // (B, Tl, H, D)
    return {dq_out, grad_incoming[0].to(k.scalar_type()), grad_incoming[1].to(v.scalar_type()), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const std::shared_ptr<distributed::Communicator>& group, RingTimes* times) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() && k.size(0) == q.size(0) &&
                  k.size(1) == q.size(1) && k.size(3) == q.size(3) && q.size(2) % k.size(2) == 0 &&
                  q.size(1) % 2 == 0,
              "ring_attention: q must be (B, Tl, H, D) and k, v (B, Tl, H_kv, D) with H % H_kv == 0, Tl even");
  RECORD_FUNCTION("ctitan::ring_attention", std::vector<c10::IValue>());
  // The inputs' dtype decides the precision, as ops::causal_attention: autocast would recast.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  // A group of one holds the whole sequence in order (chunks 0 and 1): one causal block.
  return RingAttentionFn::apply(q, k, v, reinterpret_cast<int64_t>(group.get()), reinterpret_cast<int64_t>(times));
}

}  // namespace ctitan::parallel::cp
