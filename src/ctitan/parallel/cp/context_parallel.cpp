#include "ctitan/parallel/cp/context_parallel.h"

#include "ctitan/parallel/cp/load_balance.h"

namespace ctitan::parallel::cp {

ContextParallel::ContextParallel(std::vector<models::TransformerImpl*> parts,
                                 std::shared_ptr<distributed::Communicator> group, config::CpRotateMethod method)
    : parts_(std::move(parts)), group_(group), attention_(std::move(group), method) {
  for (auto* part : parts_) {
    part->hooks.set_attention([this](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
      return attention_(q, k, v);
    });
  }
}

ContextParallel::~ContextParallel() {
  for (auto* part : parts_) {
    part->hooks.set_attention(nullptr);
    part->set_token_positions({});
  }
}

std::pair<torch::Tensor, torch::Tensor> ContextParallel::shard_batch(const torch::Tensor& inputs,
                                                                      const torch::Tensor& labels) {
  const int64_t T = inputs.size(1), rank = group_->rank(), cp = group_->size();
  if (T != positions_for_) {
    auto positions = shard_positions(T, rank, cp);  // (T / cp,)
    for (auto* part : parts_) part->set_token_positions(positions);
    positions_for_ = T;
  }
  return {shard_sequence(inputs, rank, cp), shard_sequence(labels, rank, cp)};
}

torch::Tensor ContextParallel::local_part(const torch::Tensor& x) const {
  return shard_sequence(x, group_->rank(), group_->size());
}

double ContextParallel::take_exposed_comm_seconds() {
  return attention_.take_exposed_seconds();
}

}  // namespace ctitan::parallel::cp
