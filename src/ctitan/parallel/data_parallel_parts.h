#pragma once
// Data parallelism over several model parts of one rank: an interleaved pipeline schedule gives a
// rank several stages, each its own model wrapped on its own (torchtitan's fully_shard per model
// part). The trainer keeps talking to one DataParallel; the pipeline's per-stage calls reach the
// stage's own wrapper through part().
#include <memory>
#include <vector>

#include "ctitan/parallel/data_parallel.h"

namespace ctitan::parallel {

class DataParallelParts : public DataParallel {
 public:
  explicit DataParallelParts(std::vector<std::unique_ptr<DataParallel>> parts);

  DataParallel& part(size_t i) { return *parts_.at(i); }

  // Each call goes to every part; the parts' FQNs are disjoint, so their results concatenate.
  void set_requires_gradient_sync(bool sync) override;
  void set_reshard_after_backward(bool reshard) override;
  std::vector<std::pair<std::string, torch::Tensor>> parameters_to_optimize() const override;
  ShardLayouts shard_layouts() const override;
  double take_exposed_comm_seconds() override;
  double take_grad_sync_seconds() override;

 private:
  std::vector<std::unique_ptr<DataParallel>> parts_;
};

}  // namespace ctitan::parallel
