#include "ctitan/distributed/gloo_backend.h"

#include "ctitan/distributed/wire_format.h"

namespace ctitan::distributed {
namespace {

// all_gather outputs from this size up go as one broadcast per rank (no staging copy); below it,
// Gloo's single list allgather has the lower latency. Measured crossover: 256 KB - 1 MB.
constexpr int64_t kAllGatherBroadcastBytes = int64_t(512) << 10;

}  // namespace

GlooBackend::GlooBackend(c10::intrusive_ptr<c10d::Backend> group, int rank, int size)
    : group_(std::move(group)), rank_(rank), size_(size) {}

BackendLaunch GlooBackend::all_reduce(const at::Tensor& t, ReduceOp op) {
  // 16-bit floats go as an fp32 copy, so the sum is accumulated in fp32 and rounded once; AVG is
  // a sum divided after completion. The copy is held until wait(), no longer.
  at::Tensor wire = is_16bit_float(t.scalar_type())
                        ? t.to(at::kFloat, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous)
                        : contiguous_wire(t);
  BackendLaunch launch;
  launch.held = {t, wire};
  c10d::AllreduceOptions options;
  options.reduceOp = op == ReduceOp::kMax ? to_c10d(op) : c10d::ReduceOp(c10d::ReduceOp::SUM);
  std::vector<at::Tensor> wires{wire};
  launch.works = just(group_->allreduce(wires, options));
  const int64_t divisor = op == ReduceOp::kAvg ? size_ : 1;
  if (divisor > 1 || !wire.is_same(t)) {
    launch.finish = [t, wire, divisor]() mutable {
      if (divisor > 1) wire.div_(divisor);
      if (!wire.is_same(t)) t.copy_(wire);
    };
  }
  return launch;
}

BackendLaunch GlooBackend::broadcast(const at::Tensor& t, int root) {
  auto flat = contiguous_wire(t);
  std::vector<at::Tensor> wire{bits_view(flat)};
  BackendLaunch launch;
  launch.held = {t, flat};
  if (!flat.is_same(t)) launch.finish = [t, flat]() mutable { t.copy_(flat); };
  c10d::BroadcastOptions options;
  options.rootRank = root;
  launch.works = just(group_->broadcast(wire, options));
  return launch;
}

BackendLaunch GlooBackend::barrier() {
  BackendLaunch launch;
  launch.works = just(group_->barrier());
  return launch;
}

BackendLaunch GlooBackend::all_gather_into_tensor(const at::Tensor& output, const at::Tensor& input) {
  const int64_t n = input.numel();
  auto in_flat = input.contiguous().view({-1});
  auto out_flat = output.is_contiguous() ? output.view({-1}) : at::empty({output.numel()}, output.options());
  BackendLaunch launch;
  launch.held = {output, input, in_flat, out_flat};
  if (!out_flat.is_alias_of(output)) {
    launch.finish = [output, out_flat]() mutable { output.copy_(out_flat.view(output.sizes())); };
  }
  auto out_bits = bits_view(out_flat);
  auto in_bits = bits_view(in_flat);
  if (int64_t(out_flat.nbytes()) < kAllGatherBroadcastBytes) {
    // Small: Gloo's list allgather, its outputs being views into our flat output. Gloo gathers
    // into a staging buffer and copies out of it, but at this size one operation's latency
    // matters more than a copy.
    std::vector<at::Tensor> inputs{in_bits};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int i = 0; i < size_; ++i) outputs[0].push_back(out_bits.narrow(0, i * n, n));
    launch.works = just(group_->allgather(outputs, inputs));
    return launch;
  }
  // Large: one broadcast per rank, rank i broadcasting straight from and into out[i*n, (i+1)*n).
  // Each rank sends its n elements to the N-1 others: (N-1)/N of the output per rank, as a ring
  // all-gather, and nothing is staged. (Gloo's list allgather allocates an N*n staging buffer
  // per call and copies it out: 2-5x slower from 1 MB up, see docs/COLLECTIVES.md.) The only
  // copy left is this rank's input into its own slot, skipped when the input already is that
  // slot (FSDP's in-place all-gather).
  auto own = out_flat.narrow(0, rank_ * n, n);
  if (own.data_ptr() != in_flat.data_ptr()) own.copy_(in_flat);
  for (int i = 0; i < size_; ++i) {
    std::vector<at::Tensor> slot{out_bits.narrow(0, i * n, n)};
    c10d::BroadcastOptions options;
    options.rootRank = i;
    launch.works.push_back(group_->broadcast(slot, options));
  }
  return launch;
}

// Gloo's reduce_scatter is built on all-reduce, which moves 2(N-1)/N of the buffer per rank
// (ring reduce-scatter + all-gather phases) to keep 1/N of the result. Instead one alltoall:
// rank r sends chunk j of its input to rank j and receives chunk r from every rank, then sums
// the N received chunks locally. Each rank sends and receives (N-1) * n elements, i.e. (N-1)/N
// of the buffer, the same as a ring reduce-scatter, with all N-1 transfers in flight at once.
// Cost: a receive buffer of N * n elements, held until wait(), and one local pass over it.
// 16-bit floats travel as raw bits and are summed in fp32, rounded once into the output.
BackendLaunch GlooBackend::reduce_scatter_tensor(const at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  const int64_t n = output.numel();
  auto in_flat = input.contiguous().view({-1});
  BackendLaunch launch;
  launch.held = {output, input, in_flat};
  // (N * n): chunk j as received from rank j. Held until wait(), like every buffer of a launch,
  // and no longer: a fresh block per call. The trainer's heap policy (train/housekeeping.cpp)
  // keeps freed blocks in the heap, so taking one again costs no page faults; a pool here used to
  // keep one idle between steps instead.
  auto received = at::empty({size_ * n}, in_flat.options());
  launch.held.push_back(received);
  launch.finish = [output = at::Tensor(output), received, op, N = size_, n]() mutable {
    reduce_received_chunks(received.view({N, n}), op == ReduceOp::kMax, op == ReduceOp::kAvg ? N : 1, output);
  };
  std::vector<int64_t> equal_splits;  // empty: N equal chunks
  auto recv_bits = bits_view(received), send_bits = bits_view(in_flat);
  launch.works = just(group_->alltoall_base(recv_bits, send_bits, equal_splits, equal_splits));
  return launch;
}

// Uneven splits, rows as c10d counts them (dim 0); 16-bit floats as raw bits, exact.
BackendLaunch GlooBackend::all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                                             const std::vector<int64_t>& output_splits,
                                             const std::vector<int64_t>& input_splits) {
  BackendLaunch launch;
  launch.held = {output, input};
  auto out_splits = output_splits, in_splits = input_splits;  // c10d takes them by non-const reference
  auto out_bits = bits_view(output), in_bits = bits_view(input);
  launch.works = just(group_->alltoall_base(out_bits, in_bits, out_splits, in_splits));
  return launch;
}

// Raw bits both ways, so bf16 crosses exactly. Gloo's send/recv works have no future: they
// complete in Work::wait() (Completion::kOnWait).
template <typename Start>
BackendLaunch GlooBackend::point_to_point(const at::Tensor& t, Start start) {
  std::vector<at::Tensor> wire{bits_view(t)};
  BackendLaunch launch;
  launch.held = {t};
  launch.completion = Completion::kOnWait;
  launch.works = just(start(wire));
  return launch;
}

BackendLaunch GlooBackend::send(const at::Tensor& t, int peer, int tag) {
  return point_to_point(t, [&](std::vector<at::Tensor>& wire) { return group_->send(wire, peer, tag); });
}

BackendLaunch GlooBackend::recv(const at::Tensor& t, int peer, int tag) {
  return point_to_point(t, [&](std::vector<at::Tensor>& wire) { return group_->recv(wire, peer, tag); });
}

}  // namespace ctitan::distributed
