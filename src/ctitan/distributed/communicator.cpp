#include "ctitan/distributed/communicator.h"

#include <fmt/format.h>

#include <algorithm>

#include "ctitan/distributed/gloo_group.h"
#include "ctitan/distributed/wire_format.h"

namespace ctitan::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// all_gather outputs from this size up go as one broadcast per rank (no staging copy); below it,
// Gloo's single list allgather has the lower latency. Measured crossover: 256 KB - 1 MB.
constexpr int64_t kAllGatherBroadcastBytes = int64_t(512) << 10;

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg: return c10d::ReduceOp::AVG;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// A vector of one, built without an initializer_list: its hidden array would keep a reference to
// the work until the end of the calling statement, i.e. past a synchronous wait().
std::vector<c10::intrusive_ptr<c10d::Work>> just(c10::intrusive_ptr<c10d::Work> work) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(std::move(work));
  return works;
}

// Runs the c10d call that starts a collective. Gloo rejects some arguments only here, after this
// rank numbered the collective: report it like a failed collective, and fail the group, since
// this rank's sequence numbers no longer match its peers'.
template <typename F>
auto start_backend(detail::WorkState& s, F&& start) -> decltype(start()) {
  try {
    return start();
  } catch (const std::exception& e) {
    std::string what = e.what();
    auto message = fmt::format("collective failed: {}: {}", s.label, what.substr(0, what.find('\n')));
    s.health->mark_failed(message);
    throw CommError(message);
  }
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
                                          std::vector<c10::intrusive_ptr<c10d::Work>> backends, bool async_op,
                                          Clock::time_point started) {
  state->issue_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  auto work = detail::launch(std::move(state), std::move(backends));
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
  // NCCL reduces bf16 and AVG natively (untested). Gloo gets 16-bit floats as an fp32 copy
  // (pooled: see scratch_pool.h), and AVG as a sum divided after completion.
  const bool nccl = nccl_ && t.device().is_cuda();
  torch::Tensor wire = nccl || !is_16bit_float(t.scalar_type())
                           ? contiguous_wire(t)
                           : scratch_->take(t.numel(), t.options().dtype(torch::kFloat)).view(t.sizes()).copy_(t);
  const bool pooled = wire.scalar_type() != t.scalar_type();
  state->held = {t};
  if (!pooled) state->held.push_back(wire);  // a pooled wire goes back to the pool, not to the caller
  c10d::AllreduceOptions options;
  options.reduceOp = nccl || op == ReduceOp::kMax ? to_c10d(op) : c10d::ReduceOp(c10d::ReduceOp::SUM);
  std::vector<torch::Tensor> wires{wire};
  auto backend = start_backend(*state, [&] { return backend_for(t).allreduce(wires, options); });
  const int64_t divisor = !nccl && op == ReduceOp::kAvg ? size_ : 1;
  if (divisor > 1 || !wire.is_same(t)) {
    state->finish = [t, wire, divisor, pooled, pool = scratch_]() mutable {
      if (divisor > 1) wire.div_(divisor);
      if (!wire.is_same(t)) t.copy_(wire);
      if (pooled) pool->give_back(wire);
    };
  }
  return issue(state, just(std::move(backend)), async_op, started);
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
  return issue(state, just(start_backend(*state, [&] { return backend_for(t).broadcast(wire, options); })), async_op,
               started);
}

void Communicator::barrier() {
  auto started = Clock::now();
  auto state = begin("barrier", torch::Tensor());
  issue(state, just(start_backend(*state, [&] { return gloo_->barrier(); })), /*async_op=*/false, started);
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
    return issue(state, just(start_backend(*state, [&] { return nccl_->_allgather_base(out_flat, in_flat); })),
                 async_op, started);
  }
  auto out_bits = bits_view(out_flat);
  auto in_bits = bits_view(in_flat);
  if (int64_t(out_flat.nbytes()) < kAllGatherBroadcastBytes) {
    // Small: Gloo's list allgather, its outputs being views into our flat output. Gloo gathers
    // into a staging buffer and copies out of it, but at this size one operation's latency
    // matters more than a copy.
    std::vector<torch::Tensor> inputs{in_bits};
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int i = 0; i < size_; ++i) outputs[0].push_back(out_bits.narrow(0, i * n, n));
    return issue(state, just(start_backend(*state, [&] { return gloo_->allgather(outputs, inputs); })), async_op,
                 started);
  }
  // Large: one broadcast per rank, rank i broadcasting straight from and into out[i*n, (i+1)*n).
  // Each rank sends its n elements to the N-1 others: (N-1)/N of the output per rank, as a ring
  // all-gather, and nothing is staged. (Gloo's list allgather allocates an N*n staging buffer
  // per call and copies it out: 2-5x slower from 1 MB up here, see docs/COLLECTIVES.md.) The
  // only copy left is this rank's input into its own slot, skipped when the input already is
  // that slot (FSDP's in-place all-gather).
  auto own = out_flat.narrow(0, rank_ * n, n);
  if (own.data_ptr() != in_flat.data_ptr()) own.copy_(in_flat);
  std::vector<c10::intrusive_ptr<c10d::Work>> backends;
  for (int i = 0; i < size_; ++i) {
    std::vector<torch::Tensor> slot{out_bits.narrow(0, i * n, n)};
    c10d::BroadcastOptions options;
    options.rootRank = i;
    backends.push_back(start_backend(*state, [&] { return gloo_->broadcast(slot, options); }));
  }
  return issue(state, std::move(backends), async_op, started);
}

// Gloo 1.13 has no reduce-scatter, and all_reduce-then-slice would move 2(N-1)/N of the buffer
// per rank (ring reduce-scatter + all-gather phases) to keep 1/N of the result. Instead one
// alltoall: rank r sends chunk j of its input to rank j and receives chunk r from every rank,
// then sums the N received chunks locally. Each rank sends and receives (N-1) * n elements,
// i.e. (N-1)/N of the buffer, the same as a ring reduce-scatter, with all N-1 transfers in
// flight at once. Cost: a receive buffer of N * n elements (pooled) and one local pass over it.
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
    return issue(state,
                 just(start_backend(*state, [&] { return nccl_->_reduce_scatter_base(out_flat, in_flat, options); })),
                 async_op, started);
  }
  // (N * n): chunk j as received from rank j. From the pool: see scratch_pool.h.
  auto received = scratch_->take(size_ * n, in_flat.options());
  state->finish = [output, received, op, N = size_, n, pool = scratch_]() mutable {
    reduce_received_chunks(received.view({N, n}), op == ReduceOp::kMax, op == ReduceOp::kAvg ? N : 1, output);
    pool->give_back(received);
  };
  std::vector<int64_t> equal_splits;  // empty: N equal chunks
  auto recv_bits = bits_view(received), send_bits = bits_view(in_flat);
  auto backend = start_backend(
      *state, [&] { return gloo_->alltoall_base(recv_bits, send_bits, equal_splits, equal_splits); });
  return issue(state, just(std::move(backend)), async_op, started);
}

}  // namespace ctitan::distributed
