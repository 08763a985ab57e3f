#include "ctitan/parallel/data_parallel_parts.h"

#include <stdexcept>

namespace ctitan::parallel {

DataParallelParts::DataParallelParts(std::vector<std::unique_ptr<DataParallel>> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) throw std::logic_error("DataParallelParts: no parts");
}

void DataParallelParts::set_requires_gradient_sync(bool sync) {
  for (auto& p : parts_) p->set_requires_gradient_sync(sync);
}

void DataParallelParts::set_reshard_after_backward(bool reshard) {
  for (auto& p : parts_) p->set_reshard_after_backward(reshard);
}

std::vector<std::pair<std::string, torch::Tensor>> DataParallelParts::parameters_to_optimize() const {
  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (const auto& p : parts_) {
    auto part = p->parameters_to_optimize();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

ShardLayouts DataParallelParts::shard_layouts() const {
  ShardLayouts all;
  for (const auto& p : parts_) {
    for (auto& [fqn, layout] : p->shard_layouts()) all.emplace(fqn, layout);
  }
  return all;
}

double DataParallelParts::take_exposed_comm_seconds() {
  double seconds = 0;
  for (auto& p : parts_) seconds += p->take_exposed_comm_seconds();
  return seconds;
}

// The parts' syncs happen after different backwards of the step, so their latencies add.
double DataParallelParts::take_grad_sync_seconds() {
  double seconds = 0;
  for (auto& p : parts_) seconds += p->take_grad_sync_seconds();
  return seconds;
}

}  // namespace ctitan::parallel
