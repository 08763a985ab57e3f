#include "ctitan/distributed/communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "ctitan/distributed/gloo_backend.h"
#include "ctitan/distributed/gloo_group.h"
#include "ctitan/distributed/nccl_backend.h"
#include "ctitan/distributed/stream_watchdog.h"
#include "ctitan/distributed/wire_format.h"

namespace ctitan::distributed {
namespace {

using Clock = std::chrono::steady_clock;

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

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg: return c10d::ReduceOp::AVG;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

namespace {

// The process's boards, published by one detached thread. Leaked on purpose: the thread may run
// during static destruction at exit.
struct ProgressPublisher {
  std::mutex mutex;
  std::vector<std::weak_ptr<ProgressBoard>> boards;
  bool started = false;
};

ProgressPublisher& publisher() {
  static auto* p = new ProgressPublisher();  // NOLINT: deliberate leak, see above
  return *p;
}

// Keeps the backend of a failed group alive for the rest of the process (see ~Communicator).
// Parked in a static list rather than released: memory still reachable is not a leak to
// LeakSanitizer, so `make test-asan` tells this deliberate one from real ones.
void abandon(std::unique_ptr<CollectiveBackend> backend) {
  struct Abandoned {
    std::mutex mutex;
    std::vector<std::unique_ptr<CollectiveBackend>> backends;
  };
  static auto* abandoned = new Abandoned();  // NOLINT: deliberate leak, never destroyed
  if (!backend) return;
  std::lock_guard<std::mutex> lock(abandoned->mutex);
  abandoned->backends.push_back(std::move(backend));
}

void register_board(const std::shared_ptr<ProgressBoard>& board) {
  auto& p = publisher();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.boards.push_back(board);
  if (p.started) return;
  p.started = true;
  std::thread([] {
    auto& p = publisher();
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::vector<std::shared_ptr<ProgressBoard>> live;
      {
        std::lock_guard<std::mutex> lock(p.mutex);
        std::vector<std::weak_ptr<ProgressBoard>> kept;
        for (auto& weak : p.boards) {
          if (auto board = weak.lock()) live.push_back(board), kept.push_back(weak);
        }
        p.boards.swap(kept);
      }
      for (auto& board : live) board->publish();
    }
  }).detach();
}

std::string progress_key(const std::string& group, int rank) { return fmt::format("progress/{}/{}", group, rank); }

}  // namespace

// A connection of its own (clone()): a TCPStore client serializes its calls, and the training
// thread may sit in a long store wait (a checkpoint exchange) while the board must publish.
ProgressBoard::ProgressBoard(c10::intrusive_ptr<c10d::Store> store, std::string group, int rank, int size)
    : store_(store->clone()), group_(std::move(group)), rank_(rank), size_(size) {}

void ProgressBoard::publish() {
  const int64_t seq = issued_.load();
  if (seq == published_) return;
  try {
    auto text = std::to_string(seq);
    store_->set(progress_key(group_, rank_), std::vector<uint8_t>(text.begin(), text.end()));
    published_ = seq;
  } catch (const std::exception&) {
    // The store is gone (the job is ending): nothing to report to.
  }
}

std::string ProgressBoard::missing_peers(int64_t seq) const {
  std::vector<std::string> behind;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    try {
      auto key = progress_key(group_, r);
      int64_t theirs = 0;
      if (store_->check({key})) {
        auto bytes = store_->get(key);
        theirs = std::stoll(std::string(bytes.begin(), bytes.end()));
      }
      if (theirs < seq) behind.push_back(fmt::format("rank {} (last issued #{})", r, theirs));
    } catch (const std::exception&) {
      return "";  // cannot tell: say nothing rather than guess
    }
  }
  if (behind.empty()) return "";
  return fmt::format("not issued by {} of group '{}'", fmt::join(behind, ", "), group_);
}

Communicator::Communicator(std::string name, int rank, int size, std::chrono::milliseconds timeout)
    : name_(std::move(name)), rank_(rank), size_(size), timeout_ms_(timeout.count()) {}

std::shared_ptr<Communicator> Communicator::create(c10::intrusive_ptr<c10d::Store> store, std::string name,
                                                   int rank_in_group, int group_size,
                                                   std::chrono::milliseconds timeout, const std::string& bind_host) {
  std::shared_ptr<Communicator> comm(new Communicator(name, rank_in_group, group_size, timeout));
  comm->gloo_ = std::make_unique<GlooBackend>(
      create_gloo_group(store, name, rank_in_group, group_size, timeout, bind_host), rank_in_group, group_size);
  if (group_size > 1) {
    comm->progress_ = std::make_shared<ProgressBoard>(store, name, rank_in_group, group_size);
    register_board(comm->progress_);
  }
#ifdef CTITAN_WITH_NCCL
  comm->nccl_ = NcclBackend::create_if_gpu(store, name, rank_in_group, group_size, timeout);
#endif
  return comm;
}

std::shared_ptr<Communicator> Communicator::create_local(std::string name, std::chrono::milliseconds timeout) {
  return std::shared_ptr<Communicator>(new Communicator(std::move(name), 0, 1, timeout));
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
    abandon(std::move(gloo_));
    abandon(std::move(nccl_));
  }
}

void Communicator::refuse_if_failed(const char* op) const {
  if (health_->failed()) {
    throw CommError(fmt::format("{} on group '{}' refused: the group failed earlier ({})", op, name_, health_->why()));
  }
}

std::shared_ptr<detail::WorkState> Communicator::begin(const char* op, const torch::Tensor& payload) {
  refuse_if_failed(op);
  int64_t seq = ++sequence_;
  auto s = new_state(op,
                     payload.defined()
                         ? fmt::format("{} #{} on group '{}' (rank {} of {}, {} x {})", op, seq, name_, rank_, size_,
                                       payload.numel(), dtype_name(payload.scalar_type()))
                         : fmt::format("{} #{} on group '{}' (rank {} of {})", op, seq, name_, rank_, size_),
                     payload);
  if (progress_) {
    progress_->issued(seq);
    s->missing_peers = [progress = progress_, seq] { return progress->missing_peers(seq); };
  }
  return s;
}

std::shared_ptr<detail::WorkState> Communicator::new_state(const char* op, std::string label,
                                                           const torch::Tensor& payload) {
  auto s = std::make_shared<detail::WorkState>();
  s->label = std::move(label);
  s->stats_key = op;
  s->timeout = timeout();
  s->deadline = Clock::now() + s->timeout;
  s->stats = stats_;
  s->health = health_;
  stats_->add_call(op, payload.defined() ? int64_t(payload.nbytes()) : 0);
  return s;
}

void Communicator::set_timeout(std::chrono::milliseconds t) {
  timeout_ms_ = t.count();
  if (gloo_) gloo_->set_timeout(t);
  if (nccl_) nccl_->set_timeout(t);
}

BackendLaunch Communicator::start(detail::WorkState& s, const std::function<BackendLaunch()>& start) {
  try {
    return start();
  } catch (const std::exception& e) {
    std::string what = e.what();
    auto message = fmt::format("collective failed: {}: {}", s.label, what.substr(0, what.find('\n')));
    s.health->mark_failed(message);
    throw CommError(message);
  }
}

std::shared_ptr<Work> Communicator::issue(std::shared_ptr<detail::WorkState> state, BackendLaunch launch,
                                          bool async_op, Clock::time_point started) {
  state->issue_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  state->held = std::move(launch.held);
  state->finish = std::move(launch.finish);
  state->completion = launch.completion;
  // On a device stream wait() never blocks the host, so the deadline is the watchdog's to keep.
  if (launch.completion == Completion::kStream && !launch.works.empty()) stream_watchdog().watch(state);
  auto work = detail::launch(std::move(state), std::move(launch.works));
  if (!async_op) work->wait();
  return work;
}

CollectiveBackend& Communicator::backend_for(const torch::Tensor& t) {
  return nccl_ && t.defined() && t.device().is_cuda() ? *nccl_ : *gloo_;
}

std::shared_ptr<Work> Communicator::all_reduce(torch::Tensor t, ReduceOp op, bool async_op) {
  auto started = Clock::now();
  check_reduction("all_reduce", op, t);
  auto state = begin("all_reduce", t);
  if (t.numel() == 0 || !gloo_) return issue(state, {}, async_op, started);
  return issue(state, start(*state, [&] { return backend_for(t).all_reduce(t, op); }), async_op, started);
}

std::shared_ptr<Work> Communicator::broadcast(torch::Tensor t, int root, bool async_op) {
  auto started = Clock::now();
  check_dtype("broadcast", t);
  if (root < 0 || root >= size_) {
    throw CommError(fmt::format("invalid collective: broadcast root {} is outside group '{}' of size {}", root, name_,
                                size_));
  }
  auto state = begin("broadcast", t);
  if (t.numel() == 0 || !gloo_) return issue(state, {}, async_op, started);
  return issue(state, start(*state, [&] { return backend_for(t).broadcast(t, root); }), async_op, started);
}

void Communicator::barrier() {
  auto started = Clock::now();
  auto state = begin("barrier", torch::Tensor());
  if (!gloo_) {
    issue(state, {}, /*async_op=*/false, started);
    return;
  }
  issue(state, start(*state, [&] { return gloo_->barrier(); }), /*async_op=*/false, started);
}

std::shared_ptr<Work> Communicator::all_gather_into_tensor(torch::Tensor output, torch::Tensor input, bool async_op) {
  auto started = Clock::now();
  check_pair("all_gather_into_tensor", output, input, size_, "output", "input");
  auto state = begin("all_gather", output);
  if (output.numel() == 0) return issue(state, {}, async_op, started);
  if (!gloo_) {
    output.copy_(input);  // the gathered tensor is this rank's own
    return issue(state, {}, async_op, started);
  }
  return issue(state, start(*state, [&] { return backend_for(output).all_gather_into_tensor(output, input); }),
               async_op, started);
}

std::shared_ptr<Work> Communicator::reduce_scatter_tensor(torch::Tensor output, torch::Tensor input, ReduceOp op,
                                                          bool async_op) {
  auto started = Clock::now();
  check_pair("reduce_scatter_tensor", input, output, size_, "input", "output");
  check_reduction("reduce_scatter_tensor", op, input);
  auto state = begin("reduce_scatter", input);
  if (input.numel() == 0) return issue(state, {}, async_op, started);
  if (!gloo_) {
    output.copy_(input);  // the reduction over one rank, sum or average, is its own input
    return issue(state, {}, async_op, started);
  }
  return issue(state, start(*state, [&] { return backend_for(input).reduce_scatter_tensor(output, input, op); }),
               async_op, started);
}

std::shared_ptr<Work> Communicator::all_to_all_single(torch::Tensor output, torch::Tensor input,
                                                      const std::vector<int64_t>& output_splits,
                                                      const std::vector<int64_t>& input_splits, bool async_op) {
  auto started = Clock::now();
  check_dtype("all_to_all_single", input);
  const auto rows = [](const std::vector<int64_t>& splits) {
    int64_t sum = 0;
    for (auto s : splits) sum += s;
    return sum;
  };
  const auto row_shape = [](const torch::Tensor& t) { return t.sizes().slice(std::min<size_t>(1, t.sizes().size())).vec(); };
  if (int64_t(output_splits.size()) != size_ || int64_t(input_splits.size()) != size_ || input.dim() == 0 ||
      output.dim() == 0 || rows(input_splits) != input.size(0) || rows(output_splits) != output.size(0) ||
      row_shape(input) != row_shape(output) || input.scalar_type() != output.scalar_type() ||
      input.device() != output.device() || !input.is_contiguous() || !output.is_contiguous()) {
    throw CommError(fmt::format("invalid collective: all_to_all_single needs {} splits each side summing to the rows "
                                "of contiguous output ({}) and input ({}) of one row shape, dtype and device",
                                size_, fmt::join(output.sizes(), "x"), fmt::join(input.sizes(), "x")));
  }
  auto state = begin("all_to_all", input);
  if (!gloo_) {
    output.copy_(input);  // a group of one sends everything to itself
    return issue(state, {}, async_op, started);
  }
  return issue(state, start(*state, [&] { return backend_for(input).all_to_all_single(output, input, output_splits,
                                                                                       input_splits); }),
               async_op, started);
}

std::shared_ptr<Work> Communicator::isend(torch::Tensor t, int peer, int tag) {
  return point_to_point(/*send=*/true, std::move(t), peer, tag);
}

std::shared_ptr<Work> Communicator::irecv(torch::Tensor t, int peer, int tag) {
  return point_to_point(/*send=*/false, std::move(t), peer, tag);
}

std::shared_ptr<Work> Communicator::point_to_point(bool send, torch::Tensor t, int peer, int tag) {
  auto started = Clock::now();
  const char* op = send ? "send" : "recv";
  check_dtype(op, t);
  if (!t.is_contiguous() || t.numel() == 0) {
    throw CommError(fmt::format("invalid {}: group '{}' needs a contiguous, non-empty tensor", op, name_));
  }
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw CommError(fmt::format("invalid {}: peer {} is not another rank of group '{}' (rank {} of {})", op, peer,
                                name_, rank_, size_));
  }
  if (tag < 0) throw CommError(fmt::format("invalid {}: tag {} on group '{}' is negative", op, tag, name_));
  refuse_if_failed(op);
  int64_t n = ++p2p_counts_[{send, peer}];
  auto state = new_state(op,
                         fmt::format("{} #{} {} rank {} (tag {}) on group '{}' (rank {} of {}, {} x {})", op, n,
                                     send ? "to" : "from", peer, tag, name_, rank_, size_, t.numel(),
                                     dtype_name(t.scalar_type())),
                         t);
  auto launch = start(*state, [&] { return send ? backend_for(t).send(t, peer, tag) : backend_for(t).recv(t, peer, tag); });
  return issue(state, std::move(launch), /*async_op=*/true, started);
}

}  // namespace ctitan::distributed
