#include "ctitan/parallel/cp/ring_attention.h"

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <limits>

#include "ctitan/parallel/cp/attention_blocks.h"
#include "ctitan/parallel/cp/load_balance.h"

namespace ctitan::parallel::cp {
namespace {

using torch::indexing::Slice;

using RingSettings = RingAttention::Settings;

class RingAttentionFn : public torch::autograd::Function<RingAttentionFn> {
 public:
  // q (B, Tl, H, D), k, v (B, Tl, H_kv, D) -> (B, Tl, H * D); `settings` a RingSettings*.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t settings) {
    const auto& s = *reinterpret_cast<const RingSettings*>(settings);
    const int64_t rank = s.group->rank(), cp = s.group->size();
    const int64_t B = q.size(0), Tl = q.size(1), H = q.size(2), D = q.size(3), n_rep = H / k.size(2);
    const double scale = 1.0 / std::sqrt(double(D));
    auto q_bh = q.transpose(1, 2);  // (B, H, Tl, D)
    // Keys and values travel as one tensor: (2, B, Tl, H_kv, D).
    auto rotation = make_rotation(s.method, *s.group, torch::stack({k, v}).contiguous(), s.times);
    auto out = torch::zeros({B, H, Tl, D}, q.options().dtype(torch::kFloat));
    auto lse = torch::full({B, H, Tl}, -std::numeric_limits<float>::infinity(), q.options().dtype(torch::kFloat));
    for (int64_t step = 0; step < cp; ++step) {
      auto held = rotation->keys(step);
      const auto plan = plan_block(rank, (rank - step + cp) % cp, Tl / 2);
      auto keys = [&](const torch::Tensor& t) { return heads_first(t, n_rep).index({Slice(), Slice(), plan.k_rows}); };
      auto [block_out, block_lse] =
          block_forward(q_bh.index({Slice(), Slice(), plan.q_rows}), keys(held[0]), keys(held[1]), plan.causal, scale);
      merge_block(out.index({Slice(), Slice(), plan.q_rows}), lse.index({Slice(), Slice(), plan.q_rows}), block_out,
                  block_lse);
    }
    auto result = out.to(q.scalar_type());  // (B, H, Tl, D)
    ctx->save_for_backward({q, k, v, result, lse});
    ctx->saved_data["settings"] = settings;
    return result.transpose(1, 2).reshape({B, Tl, H * D});
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto& s = *reinterpret_cast<const RingSettings*>(ctx->saved_data["settings"].toInt());
    const int64_t rank = s.group->rank(), cp = s.group->size();
    const int64_t B = q.size(0), Tl = q.size(1), H = q.size(2), D = q.size(3), n_rep = H / k.size(2);
    const double scale = 1.0 / std::sqrt(double(D));
    auto dout = grads[0].reshape({B, Tl, H, D}).transpose(1, 2).to(q.scalar_type());  // (B, H, Tl, D)
    auto q_bh = q.transpose(1, 2);
    auto dq = torch::zeros({B, H, Tl, D}, q.options().dtype(torch::kFloat));
    // The keys go around again, as in forward; their gradients (fp32) go back to their owners.
    auto rotation = make_rotation(s.method, *s.group, torch::stack({k, v}).contiguous(), s.times);
    for (int64_t step = 0; step < cp; ++step) {
      auto held = rotation->keys(step);
      const auto plan = plan_block(rank, (rank - step + cp) % cp, Tl / 2);
      auto rows = [&](const torch::Tensor& t) { return t.index({Slice(), Slice(), plan.q_rows}); };
      auto keys = [&](const torch::Tensor& t) { return heads_first(t, n_rep).index({Slice(), Slice(), plan.k_rows}); };
      auto [dq_block, dk_block, dv_block] = block_backward(rows(dout), rows(q_bh), keys(held[0]), keys(held[1]),
                                                           rows(out), rows(lse), plan.causal, scale);
      rows(dq).add_(dq_block);
      // This step's contribution to the held keys' and values' gradients: (2, B, Tl, H_kv, D).
      auto contribution = torch::zeros(held.sizes(), held.options().dtype(torch::kFloat));
      contribution[0].index({Slice(), plan.k_rows}).copy_(heads_back(dk_block, n_rep));
      contribution[1].index({Slice(), plan.k_rows}).copy_(heads_back(dv_block, n_rep));
      rotation->add_grad(step, contribution);
    }
    auto dkv = rotation->own_grad();  // summed over every rank's queries
    return {dq.transpose(1, 2).to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()),
            torch::Tensor()};
  }
};

}  // namespace

RingAttention::RingAttention(std::shared_ptr<distributed::Communicator> group, config::CpRotateMethod method)
    : group_(std::move(group)), settings_{group_.get(), &times_, method} {}

RingAttention::~RingAttention() = default;

torch::Tensor RingAttention::operator()(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() && k.size(0) == q.size(0) &&
                  k.size(1) == q.size(1) && k.size(3) == q.size(3) && q.size(2) % k.size(2) == 0 &&
                  q.size(1) % 2 == 0,
              "ring_attention: q must be (B, Tl, H, D) and k, v (B, Tl, H_kv, D) with H % H_kv == 0, Tl even");
  RECORD_FUNCTION("ctitan::ring_attention", std::vector<c10::IValue>());
  // The inputs' dtype decides the precision, as ops::causal_attention: autocast would recast.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  // A group of one holds the whole sequence in order (chunks 0 and 1): one causal block.
  return RingAttentionFn::apply(q, k, v, reinterpret_cast<int64_t>(&settings_));
}

double RingAttention::take_exposed_seconds() { return std::exchange(times_.exposed_seconds, 0.0); }

}  // namespace ctitan::parallel::cp
