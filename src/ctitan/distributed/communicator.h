#pragma once
// Communicator: collectives over one process group (a set of ranks). It owns what every transport
// shares: argument checks, labels and sequence numbers, async handles that hold buffers exactly
// until wait(), per-collective timeouts with a one-line CommError, group health, byte/time
// counters. The bytes move through a CollectiveBackend chosen by the tensor's device: Gloo for
// CPU tensors, NCCL for CUDA tensors when compiled in. docs/COLLECTIVES.md has the details.
//
// Like every c10d group: all members must issue the same collectives in the same order, from one
// thread per group. Tensors: fp32, fp64, bf16, fp16, int64, int32 (int8/uint8 pass as well).
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ctitan/distributed/collective_backend.h"
#include "ctitan/distributed/comm_error.h"
#include "ctitan/distributed/comm_stats.h"
#include "ctitan/distributed/shard_padding.h"
#include "ctitan/distributed/work.h"

namespace ctitan::distributed {

// Where each member of a group is: every member publishes the sequence number of the last
// collective it issued to the store (under "progress/<group>/<rank>"), from a background thread
// twice a second, never from the collective's own path. A rank whose collective timed out reads
// its peers' numbers to say which of them never issued it: the rank that stalled, not the one
// that noticed. A stopped process stops publishing too, so its number stays where it stopped.
class ProgressBoard {
 public:
  ProgressBoard(c10::intrusive_ptr<c10d::Store> store, std::string group, int rank, int size);
  void issued(int64_t seq) { issued_ = seq; }
  // Writes this rank's number if it changed since the last call (the publisher thread).
  void publish();
  // "rank(s) 1 of group 'x' had issued only up to #175", "" if every peer reached `seq` or
  // their numbers cannot be read.
  std::string missing_peers(int64_t seq) const;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string group_;
  int rank_, size_;
  std::atomic<int64_t> issued_{0};
  int64_t published_ = -1;  // publisher thread only
};

class Communicator {
 public:
  // Creates a group over PrefixStore(name, store) (so several groups share one store; names must
  // be unique within a job) of `group_size` ranks, this process being `rank_in_group`. Every
  // member must call it; it returns once all are connected, or throws CommError after `timeout`.
  // `timeout` is also the initial collective timeout. `bind_host`: see create_gloo_group().
  static std::shared_ptr<Communicator> create(c10::intrusive_ptr<c10d::Store> store, std::string name,
                                              int rank_in_group, int group_size, std::chrono::milliseconds timeout,
                                              const std::string& bind_host = "");
  // A group of one rank without any transport, for a job that is a world of one: its collectives
  // are exact local identities (an all-gather or reduce-scatter copies its input), and it never
  // touches Gloo or NCCL. create() with group_size 1 still runs them through the transport.
  static std::shared_ptr<Communicator> create_local(std::string name, std::chrono::milliseconds timeout);
  // The same for a group named by global ranks; `global_rank` must be one of `ranks`, and its
  // index there is its rank in the group.
  static std::shared_ptr<Communicator> create_for_ranks(c10::intrusive_ptr<c10d::Store> store, std::string name,
                                                        const std::vector<int>& ranks, int global_rank,
                                                        std::chrono::milliseconds timeout,
                                                        const std::string& bind_host = "");
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // Deadline of each later collective, counted from its issue (comm.train_timeout_seconds after
  // the first step), and the transports' own per-operation timeout (c10d Backend::setTimeout).
  void set_timeout(std::chrono::milliseconds t);
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }

  // Every collective returns a handle; with async_op = false it is already completed (and the
  // call threw if the collective failed). With async_op = true, do not touch the tensors until
  // wait() returned.

  // In place over `t`.
  std::shared_ptr<Work> all_reduce(torch::Tensor t, ReduceOp op, bool async_op = false);
  // `t` of rank `root` (a rank in this group) lands in `t` of every rank, bit for bit.
  std::shared_ptr<Work> broadcast(torch::Tensor t, int root, bool async_op = false);
  void barrier();
  // output.numel() == size() * n, n = input.numel(): rank i's input lands in output[i*n, (i+1)*n)
  // (flat order), bit for bit.
  std::shared_ptr<Work> all_gather_into_tensor(torch::Tensor output, torch::Tensor input, bool async_op = false);
  // input.numel() == size() * n, n = output.numel(): output = reduction over ranks of
  // input[rank*n, (rank+1)*n). For sizes not divisible by size(), pad (shard_padding.h).
  std::shared_ptr<Work> reduce_scatter_tensor(torch::Tensor output, torch::Tensor input, ReduceOp op,
                                              bool async_op = false);

  // Uneven all-to-all over rows (dim 0), as c10d's all_to_all_single with split sizes: input's
  // rows [sum(input_splits[0..j)), + input_splits[j]) go to rank j, and rank j's rows for this
  // rank land in output at sum(output_splits[0..j)). Each split list has size() entries; output
  // and input hold their splits' sums of rows (zero allowed), of one row shape, dtype, device.
  std::shared_ptr<Work> all_to_all_single(torch::Tensor output, torch::Tensor input,
                                          const std::vector<int64_t>& output_splits,
                                          const std::vector<int64_t>& input_splits, bool async_op = false);

  // Point-to-point (pipeline parallelism), always asynchronous: `t` goes to, or is filled from,
  // the call with the same `tag` on `peer`. `t` must be contiguous and non-empty, `peer` another
  // rank of this group, `tag` >= 0. They take no collective sequence number (peers issue
  // different p2p ops) and count per peer and direction instead. The deadline (the group's
  // timeout) counts from wait(), since receives are posted ahead of need. On Gloo a send moves
  // its bytes only once the peer posted the receive, so its wait() can block on the peer.
  std::shared_ptr<Work> isend(torch::Tensor t, int peer, int tag);
  std::shared_ptr<Work> irecv(torch::Tensor t, int peer, int tag);

  // Keyed "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier", "send", "recv".
  std::map<std::string, CollectiveStats> stats() const { return stats_->snapshot(); }
  // Collectives issued so far on this group by this rank (the "#17" of error messages).
  int64_t sequence_number() const { return sequence_.load(); }
  // The c10d backend for CPU tensors (Gloo), for benchmarks that time upstream's own algorithms.
  // A create_local() group has none.
  c10::intrusive_ptr<c10d::Backend> gloo_backend() const {
    if (!gloo_) throw std::logic_error("group '" + name_ + "' has no transport (create_local)");
    return gloo_->c10d_backend();
  }

 private:
  Communicator(std::string name, int rank, int size, std::chrono::milliseconds timeout);
  // Refuses calls on a failed group, numbers the collective and counts its bytes.
  std::shared_ptr<detail::WorkState> begin(const char* op, const torch::Tensor& payload);
  // The state every operation shares: label, stats, timeout, health. Counts the bytes.
  std::shared_ptr<detail::WorkState> new_state(const char* op, std::string label, const torch::Tensor& payload);
  void refuse_if_failed(const char* op) const;
  std::shared_ptr<Work> point_to_point(bool send, torch::Tensor t, int peer, int tag);
  // Starts the backend's part with `start` (a call on backend_for(...)); a backend that refuses
  // after this rank numbered the collective fails the group, since this rank's sequence numbers
  // no longer match its peers'.
  BackendLaunch start(detail::WorkState& state, const std::function<BackendLaunch()>& start);
  // Arms the completion of `launch`, then waits for it unless `async_op`.
  std::shared_ptr<Work> issue(std::shared_ptr<detail::WorkState> state, BackendLaunch launch, bool async_op,
                              std::chrono::steady_clock::time_point started);
  CollectiveBackend& backend_for(const torch::Tensor& t);

  std::string name_;
  int rank_;
  int size_;
  std::atomic<int64_t> timeout_ms_;
  std::atomic<int64_t> sequence_{0};
  std::map<std::pair<bool, int>, int64_t> p2p_counts_;  // (send?, peer) -> ops issued; caller's thread
  std::shared_ptr<StatsTable> stats_ = std::make_shared<StatsTable>();
  std::shared_ptr<GroupHealth> health_ = std::make_shared<GroupHealth>();
  std::shared_ptr<ProgressBoard> progress_;
  std::unique_ptr<CollectiveBackend> gloo_;  // null in a create_local() group
  std::unique_ptr<CollectiveBackend> nccl_;  // CTITAN_WITH_NCCL and a GPU visible; never run here
};

}  // namespace ctitan::distributed
