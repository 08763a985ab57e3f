#pragma once
// Collectives on CUDA tensors over c10d's ProcessGroupNCCL. Built when the libtorch is a CUDA
// build (CTITAN_WITH_NCCL); compiled, never run on a GPU: the machines ctitan is developed and
// tested on have none.
//
// The stream discipline, all of it here (FSDP2's rules; upstream c10d's default since 2025):
// - NCCL runs on c10d's own per-group stream, which first waits on an event of the issuing
//   (compute) stream, so it never reads a buffer before compute finished writing it.
// - Buffers are allocated on the compute stream and referenced by the Work until wait(), never
//   recordStream'd: the caching allocator cannot hand them to another stream while in flight.
// - Work::wait() makes the caller's current stream wait on the collective's end event (c10d's
//   Work::wait() for NCCL), without blocking the host; the gathered parameters are then used on
//   that stream, strictly after the all-gather.
// - FSDP frees an unsharded parameter on the stream that used it (its storage is resized to 0
//   on the compute stream after the block's backward): the allocator reuses that memory only for
//   work ordered after it, so no event is needed there.
#ifdef CTITAN_WITH_NCCL
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "ctitan/distributed/collective_backend.h"

namespace ctitan::distributed {

class NcclBackend final : public CollectiveBackend {
 public:
  // Null unless this process computes on a GPU (distributed/rank_device.h): a CPU run keeps Gloo.
  static std::unique_ptr<NcclBackend> create_if_gpu(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const std::string& name, int rank, int size,
                                                    std::chrono::milliseconds timeout);

  const char* name() const override { return "nccl"; }
  // NCCL reduces bf16 and averages natively; tensors must be contiguous (the Communicator
  // passes contiguous flat views).
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
  explicit NcclBackend(c10::intrusive_ptr<c10d::Backend> group) : group_(std::move(group)) {}
  c10::intrusive_ptr<c10d::Backend> group_;
};

}  // namespace ctitan::distributed
#endif
