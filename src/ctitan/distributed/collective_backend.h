#pragma once
// CollectiveBackend: how one transport moves a collective's bytes, as c10d's Backend is for a
// ProcessGroup. The Communicator owns the bookkeeping every backend shares (argument checks,
// labels, sequence numbers, stats, timeouts, group health, the Work handle); a backend only
// prepares wire buffers, starts the c10d operations and says what to do once they completed.
//   gloo_backend.{h,cpp}: CPU tensors over Gloo (bf16 as raw bits, alltoall reduce-scatter, ...)
//   nccl_backend.{h,cpp}: CUDA tensors over NCCL (CTITAN_WITH_NCCL; compiled, never run on a GPU)
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <vector>

namespace ctitan::distributed {

// kAvg = sum, then divide by the group size. Integer tensors reject kAvg (CommError): a floored
// mean is rarely what a caller wants, so they sum and divide themselves.
enum class ReduceOp { kSum, kAvg, kMax };

// How the host learns that a backend's operations completed.
enum class Completion {
  kCallback,  // each c10d work's future calls back on the backend's thread (Gloo collectives)
  kOnWait,    // only through c10d's Work::wait(timeout): Gloo's send and recv have no future
  kStream,    // ordered on a device stream; wait() makes the current stream wait (NCCL)
};

// What a backend started for one collective.
struct BackendLaunch {
  // The c10d operations making up the collective; it is complete when all are.
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  // Every buffer the operations read or write, held until Work::wait() and no longer.
  std::vector<at::Tensor> held;
  // Runs once all `works` completed: copy-back from a wire buffer, a local reduction, AVG's
  // division. Empty when there is nothing to do.
  std::function<void()> finish;
  // kStream: wait() makes the caller's current stream wait for the collective (c10d's
  // Work::wait() on NCCL) instead of blocking the host. See nccl_backend.h.
  Completion completion = Completion::kCallback;
};

// Arguments are validated by the Communicator before a backend sees them: same dtype and
// device, sizes that divide, numel() > 0. A backend throws (any exception) when c10d refuses.
class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  virtual const char* name() const = 0;
  // In place over `t`.
  virtual BackendLaunch all_reduce(const at::Tensor& t, ReduceOp op) = 0;
  virtual BackendLaunch broadcast(const at::Tensor& t, int root) = 0;
  // output: size * input.numel() elements; rank i's input lands in output[i*n, (i+1)*n).
  virtual BackendLaunch all_gather_into_tensor(const at::Tensor& output, const at::Tensor& input) = 0;
  // input: size * output.numel() elements; output = reduction of input[rank*n, (rank+1)*n).
  virtual BackendLaunch reduce_scatter_tensor(const at::Tensor& output, const at::Tensor& input, ReduceOp op) = 0;
  // Rows (dim 0) of `input` in blocks of input_splits[j] rows go to rank j; rank j's block for
  // this rank lands in `output` at the offset of output_splits[0..j). Both contiguous, same row shape.
  virtual BackendLaunch all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                                          const std::vector<int64_t>& output_splits,
                                          const std::vector<int64_t>& input_splits) = 0;
  virtual BackendLaunch barrier() = 0;
  // Point-to-point: `t` (contiguous) goes to, or is filled from, the same-tag call of `peer`.
  virtual BackendLaunch send(const at::Tensor& t, int peer, int tag) = 0;
  virtual BackendLaunch recv(const at::Tensor& t, int peer, int tag) = 0;
  // Changes the transport's own per-operation timeout (c10d Backend::setTimeout).
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
  virtual c10::intrusive_ptr<c10d::Backend> c10d_backend() const = 0;
};

// A vector of one, built without an initializer_list: its hidden array would keep a reference to
// the work until the end of the calling statement, i.e. past a synchronous wait().
inline std::vector<c10::intrusive_ptr<c10d::Work>> just(c10::intrusive_ptr<c10d::Work> work) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(std::move(work));
  return works;
}

c10d::ReduceOp to_c10d(ReduceOp op);

}  // namespace ctitan::distributed
