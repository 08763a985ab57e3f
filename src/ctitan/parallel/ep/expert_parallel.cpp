#include "ctitan/parallel/ep/expert_parallel.h"

#include <fmt/format.h>

#include <chrono>

#include "ctitan/models/common/deferred_init.h"
#include "ctitan/parallel/deferred_params.h"

namespace ctitan::parallel::ep {
namespace {

using Exchange = ExpertParallel::Exchange;

int64_t total(const std::vector<int64_t>& v) {
  int64_t sum = 0;
  for (auto x : v) sum += x;
  return sum;
}

// One all-to-all of rows, timed and counted.
torch::Tensor exchange_rows(const torch::Tensor& input, const std::vector<int64_t>& output_splits,
                            const std::vector<int64_t>& input_splits, Exchange& exchange) {
  auto in = input.contiguous();
  auto sizes = in.sizes().vec();
  sizes[0] = total(output_splits);
  auto out = torch::empty(sizes, in.options());
  const auto start = std::chrono::steady_clock::now();
  exchange.group->all_to_all_single(out, in, output_splits, input_splits);
  exchange.waited_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  exchange.sent_bytes += int64_t(in.nbytes());
  return out;
}

class AllToAllRows : public torch::autograd::Function<AllToAllRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               std::vector<int64_t> output_splits, std::vector<int64_t> input_splits, int64_t exchange) {
    ctx->saved_data["output_splits"] = output_splits;
    ctx->saved_data["input_splits"] = input_splits;
    ctx->saved_data["exchange"] = exchange;
    return exchange_rows(input, output_splits, input_splits, *reinterpret_cast<Exchange*>(exchange));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto& exchange = *reinterpret_cast<Exchange*>(ctx->saved_data["exchange"].toInt());
    // The gradient of each received row goes back to its sender: the splits swap.
    auto grad = exchange_rows(grads[0], ctx->saved_data["input_splits"].toIntVector(),
                              ctx->saved_data["output_splits"].toIntVector(), exchange);
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The experts' dispatch for one ep group: see the header's diagram.
torch::Tensor dispatch(const torch::Tensor& routed, const torch::Tensor& counts,
                       const models::ModuleHooks::LocalExperts& local, Exchange& exchange) {
  auto& group = *exchange.group;
  const int64_t ep = group.size(), experts = counts.numel(), per_rank = experts / ep;
  // (ep, E/ep): row j, this rank's counts for rank j's experts -> row i, rank i's for this rank's.
  auto sent_counts = counts.view({ep, per_rank}).contiguous();
  auto received_counts = torch::empty_like(sent_counts);
  const std::vector<int64_t> one_row_each(static_cast<size_t>(ep), 1);
  {
    const auto start = std::chrono::steady_clock::now();
    group.all_to_all_single(received_counts, sent_counts, one_row_each, one_row_each);
    exchange.waited_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // The splits on the host (on CUDA this waits for the router, as torchtitan's dispatch does).
  auto sent_host = sent_counts.cpu(), received_host = received_counts.cpu();  // (ep, E/ep) int64
  std::vector<int64_t> input_splits(static_cast<size_t>(ep)), output_splits(static_cast<size_t>(ep));
  for (int64_t j = 0; j < ep; ++j) {
    input_splits[size_t(j)] = sent_host[j].sum().item<int64_t>();
    output_splits[size_t(j)] = received_host[j].sum().item<int64_t>();
  }
  auto received = all_to_all_rows(routed, output_splits, input_splits, exchange);  // (R, dim), source-major
  // Each received row's local expert, source-major: source i's rows for experts 0..E/ep-1 in order.
  auto expert_of_row = torch::arange(per_rank, torch::kLong).repeat({ep}).repeat_interleave(received_host.view({-1}));
  auto order = std::get<1>(expert_of_row.sort(std::optional<bool>(true), 0, false)).to(routed.device());  // expert-major
  auto inverse = torch::empty_like(order).scatter_(0, order, torch::arange(order.numel(), order.options()));
  auto local_counts_t = received_host.sum(0);  // (E/ep)
  std::vector<int64_t> local_counts(local_counts_t.data_ptr<int64_t>(), local_counts_t.data_ptr<int64_t>() + per_rank);
  auto computed = local(received.index_select(0, order), local_counts);  // (R, dim), expert-major
  // Back to source-major, then each row home: the reverse splits.
  return all_to_all_rows(computed.index_select(0, inverse), input_splits, output_splits, exchange);
}

}  // namespace

torch::Tensor all_to_all_rows(const torch::Tensor& input, const std::vector<int64_t>& output_splits,
                              const std::vector<int64_t>& input_splits, ExpertParallel::Exchange& exchange) {
  return AllToAllRows::apply(input, output_splits, input_splits, reinterpret_cast<int64_t>(&exchange));
}

ExpertParallel::ExpertParallel(const std::vector<models::TransformerImpl*>& parts,
                               std::shared_ptr<distributed::Communicator> group)
    : group_(std::move(group)), exchange_(std::make_unique<Exchange>()) {
  exchange_->group = group_.get();
  const int64_t ep = group_->size(), rank = group_->rank();
  torch::NoGradGuard no_grad;
  for (auto* part : parts) {
    for (auto* block : part->blocks()) {
      if (!block->moe) continue;
      auto& experts = *block->moe->experts;
      const int64_t e = experts.w1.size(0);
      TORCH_CHECK(e % ep == 0, "expert parallelism: ", e, " experts do not split over ", ep, " ranks");
      const int64_t rows = e / ep;
      for (auto [name, param] : {std::pair<const char*, torch::Tensor*>{"w1", &experts.w1}, {"w2", &experts.w2},
                                 {"w3", &experts.w3}}) {
        const auto fqn = fmt::format("layers.{}.moe.experts.{}", block->layer_id, name);
        ShardLayout layout{param->sizes().vec(), std::vector<int64_t>(size_t(param->dim()), 0)};
        layout.offsets[0] = rank * rows;
        layouts_[fqn] = layout;
        if (models::is_deferred(*param)) {
          auto sizes = param->sizes().vec();
          sizes[0] = rows;
          param->set_data(deferred_tensor(sizes, param->options()));
        } else {
          param->set_data(param->narrow(0, rank * rows, rows).clone());  // a copy: the rest is freed
        }
      }
    }
    auto* exchange = exchange_.get();
    part->hooks.set_experts([exchange](const torch::Tensor& routed, const torch::Tensor& counts,
                                       const models::ModuleHooks::LocalExperts& local) {
      return dispatch(routed, counts, local, *exchange);
    });
  }
}

double ExpertParallel::take_exposed_comm_seconds() { return std::exchange(exchange_->waited_seconds, 0.0); }

int64_t ExpertParallel::take_sent_bytes() { return std::exchange(exchange_->sent_bytes, int64_t(0)); }

}  // namespace ctitan::parallel::ep
