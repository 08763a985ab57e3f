#include "ctitan/parallel/cp/context_parallel.h"

#include "ctitan/parallel/cp/load_balance.h"

namespace ctitan::parallel::cp {

ContextParallel::ContextParallel(std::vector<models::TransformerImpl*> parts,
                                 std::shared_ptr<distributed::Communicator> group)
    : parts_(std::move(parts)), group_(std::move(group)) {
  for (auto* part : parts_) {
    part->hooks.set_attention([this](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
      return ring_attention(q, k, v, group_, &times_);
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

double ContextParallel::take_exposed_comm_seconds() {
  return std::exchange(times_.exposed_seconds, 0.0);
}

}  // namespace ctitan::parallel::cp
