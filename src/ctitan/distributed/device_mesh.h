#pragma once
// An N-D grid of ranks with named dimensions, as torch's DeviceMesh: ranks are laid out row-major
// (the last dimension varies fastest), and along each dimension a rank's group is the ranks that
// share all its other coordinates. Groups are created once and reused.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ctitan::distributed {

class Communicator;

class DeviceMesh {
 public:
  DeviceMesh(std::vector<std::string> names, std::vector<int64_t> sizes, int64_t rank);

  int64_t rank() const { return rank_; }
  int64_t world_size() const;
  int64_t size(const std::string& dim) const;
  std::vector<int64_t> coordinate() const { return coordinate_of(rank_); }
  std::vector<int64_t> coordinate_of(int64_t rank) const;
  // Index of this rank within its group along `dim`.
  int64_t local_rank(const std::string& dim) const;
  // Global ranks of this rank's group along `dim`, in group-rank order. `dim` may also be a name
  // given to flatten().
  std::vector<int64_t> group_ranks(const std::string& dim) const;

  // Treats several dimensions as one (e.g. "dp" = dp_replicate x dp_shard) for group purposes.
  void flatten(const std::vector<std::string>& dims, const std::string& name);

  // Creates this rank's group along every dimension and every flattened name. Only the members of
  // a group take part in creating it, so ranks never wait on groups they are not in.
  void create_groups(const c10::intrusive_ptr<c10d::Store>& store, std::chrono::milliseconds timeout);
  // A mesh of one rank (a world of one): every group is Communicator::create_local, no transport.
  void create_local_groups(std::chrono::milliseconds timeout);
  std::shared_ptr<Communicator> group(const std::string& dim) const;

  // Every group of this rank gets `timeout` (torchtitan's set_pg_timeouts): each group first
  // meets in a barrier, so no rank shortens a timeout while a peer is still inside a collective
  // that started under the old one. Every rank calls it at the same step.
  void set_timeouts(std::chrono::milliseconds timeout);
  // Payload bytes of every collective issued on this rank's groups so far.
  int64_t comm_bytes() const;
  // Seconds callers were blocked in collectives on those groups so far (overlapped time excluded).
  double comm_seconds() const;

 private:
  std::vector<int64_t> dims_of(const std::string& name) const;  // indices of the mesh dims
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_;
  int64_t rank_;
  std::map<std::string, std::vector<std::string>> flattened_;
  std::map<std::string, std::shared_ptr<Communicator>> groups_;
};

}  // namespace ctitan::distributed
