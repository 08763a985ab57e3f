#include "ctitan/distributed/nccl_backend.h"

#ifdef CTITAN_WITH_NCCL
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "ctitan/cuda/cuda_module.h"
#include "ctitan/distributed/rank_device.h"

namespace ctitan::distributed {
namespace {

// A contiguous tensor to hand NCCL and, when it is a copy, the copy-back after completion. The
// copy runs on the compute stream after wait() ordered it behind the collective.
at::Tensor contiguous_or_copy(const at::Tensor& t, BackendLaunch& launch) {
  if (t.is_contiguous()) return t;
  auto wire = t.contiguous();
  launch.finish = [t, wire]() mutable { t.copy_(wire); };
  return wire;
}

}  // namespace

std::unique_ptr<NcclBackend> NcclBackend::create_if_gpu(const c10::intrusive_ptr<c10d::Store>& store,
                                                        const std::string& name, int rank, int size,
                                                        std::chrono::milliseconds timeout) {
  // A CPU run on a GPU machine (training.device = cpu, or a test pinned to the CPU) stays on Gloo:
  // NCCL would bind every local rank to a GPU it does not use.
  if (!process_device().is_cuda()) return nullptr;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name + "/nccl", store);
  auto group = cuda::make_nccl_group_if_gpu(prefixed, rank, size, timeout);  // ProcessGroupNCCL
  if (!group) return nullptr;
  return std::unique_ptr<NcclBackend>(new NcclBackend(std::move(group)));
}

BackendLaunch NcclBackend::all_reduce(const at::Tensor& t, ReduceOp op) {
  BackendLaunch launch;
  launch.completion = Completion::kStream;
  auto wire = contiguous_or_copy(t, launch);
  launch.held = {t, wire};
  std::vector<at::Tensor> wires{wire};
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op);
  launch.works = just(group_->allreduce(wires, options));
  return launch;
}

BackendLaunch NcclBackend::broadcast(const at::Tensor& t, int root) {
  BackendLaunch launch;
  launch.completion = Completion::kStream;
  auto wire = contiguous_or_copy(t, launch);
  launch.held = {t, wire};
  std::vector<at::Tensor> wires{wire};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  launch.works = just(group_->broadcast(wires, options));
  return launch;
}

BackendLaunch NcclBackend::all_gather_into_tensor(const at::Tensor& output, const at::Tensor& input) {
  BackendLaunch launch;
  launch.completion = Completion::kStream;
  auto out = contiguous_or_copy(output, launch);
  auto in = input.contiguous();
  launch.held = {output, input, out, in};
  launch.works = just(group_->_allgather_base(out, in));
  return launch;
}

BackendLaunch NcclBackend::reduce_scatter_tensor(const at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  BackendLaunch launch;
  launch.completion = Completion::kStream;
  auto out = contiguous_or_copy(output, launch);
  auto in = input.contiguous();
  launch.held = {output, input, out, in};
  c10d::ReduceScatterOptions options;
  options.reduceOp = to_c10d(op);
  launch.works = just(group_->_reduce_scatter_base(out, in, options));
  return launch;
}

BackendLaunch NcclBackend::all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                                             const std::vector<int64_t>& output_splits,
                                             const std::vector<int64_t>& input_splits) {
  BackendLaunch launch;
  launch.completion = Completion::kStream;
  launch.held = {output, input};
  auto out_splits = output_splits, in_splits = input_splits;
  auto out = output, in = input;  // handles: c10d takes non-const references
  launch.works = just(group_->alltoall_base(out, in, out_splits, in_splits));
  return launch;
}

BackendLaunch NcclBackend::barrier() {
  BackendLaunch launch;
  launch.completion = Completion::kStream;
  launch.works = just(group_->barrier());
  return launch;
}

// Stream-ordered as the collectives. PyTorch warms NCCL's p2p communicators with a neighbour
// exchange first; compiled, never run on a GPU.
template <typename Start>
BackendLaunch NcclBackend::point_to_point(const at::Tensor& t, Start start) {
  BackendLaunch launch;
  launch.completion = Completion::kStream;
  std::vector<at::Tensor> wires{t};
  launch.held = {t};
  launch.works = just(start(wires));
  return launch;
}

BackendLaunch NcclBackend::send(const at::Tensor& t, int peer, int tag) {
  return point_to_point(t, [&](std::vector<at::Tensor>& wires) { return group_->send(wires, peer, tag); });
}

BackendLaunch NcclBackend::recv(const at::Tensor& t, int peer, int tag) {
  return point_to_point(t, [&](std::vector<at::Tensor>& wires) { return group_->recv(wires, peer, tag); });
}

}  // namespace ctitan::distributed
#endif
