#include "ctitan/distributed/communicator.h"

#include <fmt/format.h>

#include <algorithm>

#include "ctitan/distributed/gloo_group.h"
#include "ctitan/distributed/wire_format.h"

namespace ctitan::distributed {
namespace {

using Clock = std::chrono::steady_clock;

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg: return c10d::ReduceOp::AVG;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

void check_reduction(const char* collective, ReduceOp op, const torch::Tensor& t) {
  check_dtype(collective, t);
  if (op == ReduceOp::kAvg && !t.is_floating_point()) {
    throw CommError(fmt::format("invalid collective: {} with ReduceOp::kAvg on an integer tensor ({}); use kSum "
                                "and divide", collective, dtype_name(t.scalar_type())));
  }
}

void check_pair(const char* collective, const torch::Tensor& big, const torch::Tensor& small, int64_t size,
                const char* big_name, const char* small_name) {
  check_dtype(collective, big);
  if (big.scalar_type() != small.scalar_type() || big.device() != small.device()) {
    throw CommError(fmt::format("invalid collective: {} needs {} and {} of one dtype and device (got {} on {}, {} on {})",
                                collective, big_name, small_name, dtype_name(big.scalar_type()), big.device().str(),
                                dtype_name(small.scalar_type()), small.device().str()));
  }
  if (big.numel() != size * small.numel()) {
    throw CommError(fmt::format("invalid collective: {} needs {}.numel() == {} x {}.numel() (got {} and {}); pad "
                                "with shard_padding.h", collective, big_name, size, small_name, big.numel(),
                                small.numel()));
  }
}

}  // namespace

Communicator::Communicator(std::string name, int rank, int size, std::chrono::milliseconds timeout)
    : name_(std::move(name)), rank_(rank), size_(size), timeout_ms_(timeout.count()) {}

std::shared_ptr<Communicator> Communicator::create(c10::intrusive_ptr<c10d::Store> store, std::string name,
                                                   int rank_in_group, int group_size,
                                                   std::chrono::milliseconds timeout, const std::string& bind_host) {
  std::shared_ptr<Communicator> comm(new Communicator(name, rank_in_group, group_size, timeout));
  comm->gloo_ = create_gloo_group(store, name, rank_in_group, group_size, timeout, bind_host);
#ifdef CTITAN_WITH_NCCL
  comm->nccl_ = create_nccl_group(store, name, rank_in_group, group_size, timeout);  // UNTESTED
#endif
  return comm;
}

std::shared_ptr<Communicator> Communicator::create_for_ranks(c10::intrusive_ptr<c10d::Store> store, std::string name,
                                                             const std::vector<int>& ranks, int global_rank,
                                                             std::chrono::milliseconds timeout,
                                                             const std::string& bind_host) {
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end()) {
    throw CommError(fmt::format("group '{}': global rank {} is not one of its ranks [{}]", name, global_rank,
                                fmt::join(ranks, ", ")));
  }
  return create(std::move(store), std::move(name), int(it - ranks.begin()), int(ranks.size()), timeout, bind_host);
}

Communicator::~Communicator() {
  // After a timeout a Gloo worker thread may still be blocked inside the collective, and
  // ~ProcessGroupGloo joins its threads: destroying the group would hang the exit for up to
  // Gloo's own timeout. A failed group is about to take its process down anyway, so leak it.
  if (health_->failed()) {
    new c10::intrusive_ptr<c10d::ProcessGroup>(std::move(gloo_));  // NOLINT: deliberate leak
    new c10::intrusive_ptr<c10d::ProcessGroup>(std::move(nccl_));  // NOLINT: deliberate leak
  }
}

std::shared_ptr<detail::WorkState> Communicator::begin(const char* op, const torch::Tensor& payload) {
  if (health_->failed()) {
    throw CommError(fmt::format("{} on group '{}' refused: the group failed earlier ({})", op, name_, health_->why()));
  }
  auto s = std::make_shared<detail::WorkState>();
  int64_t seq = ++sequence_;
  s->label = payload.defined()
                 ? fmt::format("{} #{} on group '{}' (rank {} of {}, {} x {})", op, seq, name_, rank_, size_,
                               payload.numel(), dtype_name(payload.scalar_type()))
                 : fmt::format("{} #{} on group '{}' (rank {} of {})", op, seq, name_, rank_, size_);
  s->stats_key = op;
  s->timeout = timeout();
  s->deadline = Clock::now() + s->timeout;
  s->stats = stats_;
  s->health = health_;
  stats_->add_call(op, payload.defined() ? int64_t(payload.nbytes()) : 0);
  return s;
}

std::shared_ptr<Work> Communicator::issue(std::shared_ptr<detail::WorkState> state,
                                          c10::intrusive_ptr<c10d::Work> backend, bool async_op,
                                          Clock::time_point started) {
  state->issue_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  auto work = backend ? detail::launch(std::move(state), std::move(backend))
                      : detail::complete_locally(std::move(state));
  if (!async_op) work->wait();
  return work;
}

c10d::ProcessGroup& Communicator::backend_for(const torch::Tensor& t) {
  return nccl_ && t.device().is_cuda() ? *nccl_ : *gloo_;
}

std::shared_ptr<Work> Communicator::all_reduce(torch::Tensor t, ReduceOp op, bool async_op) {
  auto started = Clock::now();
  check_reduction("all_reduce", op, t);
  auto state = begin("all_reduce", t);
  if (t.numel() == 0) return issue(state, {}, async_op, started);
  // NCCL reduces bf16 and AVG natively (untested); Gloo gets an fp32 wire for 16-bit floats and
  // a sum for AVG, divided after completion.
  const bool nccl = nccl_ && t.device().is_cuda();
  std::vector<torch::Tensor> wire{nccl ? contiguous_wire(t) : reduction_wire(t)};
  state->held = {t, wire[0]};
  c10d::AllreduceOptions options;
  options.reduceOp = nccl || op == ReduceOp::kMax ? to_c10d(op) : c10d::ReduceOp(c10d::ReduceOp::SUM);
  auto backend = backend_for(t).allreduce(wire, options);
  const int64_t divisor = !nccl && op == ReduceOp::kAvg ? size_ : 1;
  if (divisor > 1 || !wire[0].is_same(t)) {
    state->finish = [t, w = wire[0], divisor]() mutable {
      if (divisor > 1) w.div_(divisor);
      if (!w.is_same(t)) t.copy_(w);
    };
  }
  return issue(state, std::move(backend), async_op, started);
}

std::shared_ptr<Work> Communicator::broadcast(torch::Tensor t, int root, bool async_op) {
  auto started = Clock::now();
  check_dtype("broadcast", t);
  if (root < 0 || root >= size_) {
    throw CommError(fmt::format("invalid collective: broadcast root {} is outside group '{}' of size {}", root, name_,
                                size_));
  }
  auto state = begin("broadcast", t);
  if (t.numel() == 0) return issue(state, {}, async_op, started);
  auto flat = contiguous_wire(t);
  std::vector<torch::Tensor> wire{bits_view(flat)};
  state->held = {t, flat};
  if (!flat.is_same(t)) state->finish = [t, flat]() mutable { t.copy_(flat); };
  c10d::BroadcastOptions options;
  options.rootRank = root;
  return issue(state, backend_for(t).broadcast(wire, options), async_op, started);
}

void Communicator::barrier() {
  auto started = Clock::now();
  auto state = begin("barrier", torch::Tensor());
  issue(state, gloo_->barrier(), /*async_op=*/false, started);
}

std::shared_ptr<Work> Communicator::all_gather_into_tensor(torch::Tensor output, torch::Tensor input, bool async_op) {
  auto started = Clock::now();
  check_pair("all_gather_into_tensor", output, input, size_, "output", "input");
  auto state = begin("all_gather", output);
  if (output.numel() == 0) return issue(state, {}, async_op, started);
  const int64_t n = input.numel();
  auto in_flat = input.contiguous().view({-1});
  auto out_flat = output.is_contiguous() ? output.view({-1}) : torch::empty({output.numel()}, output.options());
  state->held = {output, input, in_flat, out_flat};
  if (!out_flat.is_alias_of(output)) {
    state->finish = [output, out_flat]() mutable { output.copy_(out_flat.view(output.sizes())); };
  }
  if (nccl_ && output.device().is_cuda()) {  // untested
    return issue(state, nccl_->_allgather_base(out_flat, in_flat), async_op, started);
  }
  // Gloo's list allgather, its outputs being views into our flat output: no copy on our side.
  // (Gloo gathers into a staging buffer of its own and copies into the views: one local copy.)
  std::vector<torch::Tensor> inputs{bits_view(in_flat)};
  std::vector<std::vector<torch::Tensor>> outputs(1);
  auto out_bits = bits_view(out_flat);
  for (int i = 0; i < size_; ++i) outputs[0].push_back(out_bits.narrow(0, i * n, n));
  return issue(state, gloo_->allgather(outputs, inputs), async_op, started);
}

// Gloo 1.13 has no reduce-scatter, and all_reduce-then-slice would move 2(N-1)/N of the buffer
// per rank (ring reduce-scatter + all-gather phases) to keep 1/N of the result. Instead one
// alltoall: rank r sends chunk j of its input to rank j and receives chunk r from every rank,
// then sums the N received chunks locally. Each rank sends and receives (N-1) * n elements,
// i.e. (N-1)/N of the buffer, the same as a ring reduce-scatter, with all N-1 transfers in
// flight at once. Cost: one receive buffer of N * n elements, and a local pass over it.
// 16-bit floats travel as raw bits and are summed in fp32, rounded once into the output.
std::shared_ptr<Work> Communicator::reduce_scatter_tensor(torch::Tensor output, torch::Tensor input, ReduceOp op,
                                                          bool async_op) {
  auto started = Clock::now();
  check_pair("reduce_scatter_tensor", input, output, size_, "input", "output");
  check_reduction("reduce_scatter_tensor", op, input);
  auto state = begin("reduce_scatter", input);
  if (input.numel() == 0) return issue(state, {}, async_op, started);
  const int64_t n = output.numel();
  auto in_flat = input.contiguous().view({-1});
  state->held = {output, input, in_flat};
  if (nccl_ && input.device().is_cuda()) {  // untested
    auto out_flat = output.is_contiguous() ? output.view({-1}) : torch::empty({n}, output.options());
    state->held.push_back(out_flat);
    if (!out_flat.is_alias_of(output)) {
      state->finish = [output, out_flat]() mutable { output.copy_(out_flat.view(output.sizes())); };
    }
    c10d::ReduceScatterOptions options;
    options.reduceOp = to_c10d(op);
    return issue(state, nccl_->_reduce_scatter_base(out_flat, in_flat, options), async_op, started);
  }
  auto received = torch::empty({size_ * n}, in_flat.options());  // (N * n): chunk j came from rank j
  state->held.push_back(received);
  state->finish = [output, received, op, N = size_, n]() mutable {
    reduce_received_chunks(received.view({N, n}), op == ReduceOp::kMax, op == ReduceOp::kAvg ? N : 1, output);
  };
  auto send_bits = bits_view(in_flat);
  auto recv_bits = bits_view(received);
  std::vector<int64_t> equal_splits;  // empty: N equal chunks
  return issue(state, gloo_->alltoall_base(recv_bits, send_bits, equal_splits, equal_splits), async_op, started);
}

}  // namespace ctitan::distributed
