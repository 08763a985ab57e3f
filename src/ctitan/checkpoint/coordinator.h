#pragma once
// How the ranks of a save or load agree: rank 0 gathers every rank's plan and results (as DCP's
// planner does), and every rank learns whether the others failed. The only collective the
// checkpointer needs is an all-gather of short strings.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ctitan::checkpoint {

class Coordinator {
 public:
  virtual ~Coordinator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Every rank's `mine`, indexed by rank. Every rank calls it, in the same order; it may be
  // called from a background thread as long as one thread at a time uses the coordinator.
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
  // How long all_gather waits for the other ranks before a CommError naming the ranks that did
  // not arrive: the trainer sets comm.train_timeout_seconds after the first step, as for every
  // collective.
  virtual void set_timeout(std::chrono::milliseconds /*timeout*/) {}
};

// A single process.
std::shared_ptr<Coordinator> local_coordinator();
// Over the job's store, under "checkpoint/": keys are numbered by call, so they never collide.
// A rank that died or stalled makes the others fail after the timeout (the store's until
// set_timeout), with one line naming the missing ranks, not hang.
std::shared_ptr<Coordinator> store_coordinator(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size);

// The error strings of all ranks joined as "rank R: message; ...", or "" if every one is empty.
std::string join_rank_errors(const std::vector<std::string>& errors);

}  // namespace ctitan::checkpoint
