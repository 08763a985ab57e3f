#pragma once
// Collectives on CPU tensors over c10d's ProcessGroupGloo, with the algorithms ctitan chose over
// upstream Gloo's where bench/collectives measured them faster (docs/COLLECTIVES.md):
// - all_gather: one broadcast per rank into the flat output above 512 KB (no staging copy);
// - reduce_scatter: one alltoall plus a local sum (upstream's is an all-reduce: twice the bytes);
// - bf16: raw bits for moves, fp32 for Gloo's reductions (wire_format.h).
#include <memory>
#include <string>

#include "ctitan/distributed/collective_backend.h"

namespace ctitan::distributed {

class GlooBackend final : public CollectiveBackend {
 public:
  // `group`: a ProcessGroupGloo of `size` ranks, this one being `rank` (gloo_group.h creates it).
  GlooBackend(c10::intrusive_ptr<c10d::Backend> group, int rank, int size);

  const char* name() const override { return "gloo"; }
  BackendLaunch all_reduce(const at::Tensor& t, ReduceOp op) override;
  BackendLaunch broadcast(const at::Tensor& t, int root) override;
  BackendLaunch all_gather_into_tensor(const at::Tensor& output, const at::Tensor& input) override;
  BackendLaunch reduce_scatter_tensor(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  BackendLaunch all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                                  const std::vector<int64_t>& output_splits,
                                  const std::vector<int64_t>& input_splits) override;
  BackendLaunch barrier() override;
  BackendLaunch send(const at::Tensor& t, int peer, int tag) override;
  BackendLaunch recv(const at::Tensor& t, int peer, int tag) override;
  void set_timeout(std::chrono::milliseconds timeout) override { group_->setTimeout(timeout); }
  c10::intrusive_ptr<c10d::Backend> c10d_backend() const override { return group_; }

 private:
  // A send or recv (`start` calls the c10d op on the wire tensors).
  template <typename Start>
  BackendLaunch point_to_point(const at::Tensor& t, Start start);
  c10::intrusive_ptr<c10d::Backend> group_;
  int rank_;
  int size_;
};

}  // namespace ctitan::distributed
