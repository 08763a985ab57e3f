#include "ctitan/distributed/device_mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ctitan/common/error.h"
#include "ctitan/distributed/communicator.h"

namespace ctitan::distributed {

DeviceMesh::DeviceMesh(std::vector<std::string> names, std::vector<int64_t> sizes, int64_t rank)
    : names_(std::move(names)), sizes_(std::move(sizes)), rank_(rank) {
  TORCH_CHECK(names_.size() == sizes_.size(), "DeviceMesh: one size per dimension name");
  TORCH_CHECK(rank_ >= 0 && rank_ < world_size(), "DeviceMesh: rank ", rank_, " outside ", world_size());
}

int64_t DeviceMesh::world_size() const {
  int64_t n = 1;
  for (auto s : sizes_) n *= s;
  return n;
}

std::vector<int64_t> DeviceMesh::dims_of(const std::string& name) const {
  auto flat = flattened_.find(name);
  std::vector<std::string> wanted = flat == flattened_.end() ? std::vector<std::string>{name} : flat->second;
  std::vector<int64_t> indices;
  for (const auto& w : wanted) {
    auto it = std::find(names_.begin(), names_.end(), w);
    if (it == names_.end()) {
      throw std::logic_error(fmt::format("device mesh has no dimension '{}' (dimensions: {})", w, fmt::join(names_, ", ")));
    }
    indices.push_back(it - names_.begin());
  }
  return indices;
}

int64_t DeviceMesh::size(const std::string& dim) const {
  int64_t n = 1;
  for (auto i : dims_of(dim)) n *= sizes_[size_t(i)];
  return n;
}

std::vector<int64_t> DeviceMesh::coordinate_of(int64_t rank) const {
  std::vector<int64_t> coord(sizes_.size());
  for (size_t i = sizes_.size(); i-- > 0;) {
    coord[i] = rank % sizes_[i];
    rank /= sizes_[i];
  }
  return coord;
}

std::vector<int64_t> DeviceMesh::group_ranks(const std::string& dim) const {
  auto indices = dims_of(dim);
  auto mine = coordinate();
  std::vector<int64_t> members;
  // Ranks in increasing order keep the group's rank order the flattened (row-major) order.
  for (int64_t r = 0; r < world_size(); ++r) {
    auto c = coordinate_of(r);
    bool same = true;
    for (size_t i = 0; i < c.size() && same; ++i) {
      bool free_dim = std::find(indices.begin(), indices.end(), int64_t(i)) != indices.end();
      same = free_dim || c[i] == mine[i];
    }
    if (same) members.push_back(r);
  }
  return members;
}

int64_t DeviceMesh::local_rank(const std::string& dim) const {
  auto members = group_ranks(dim);
  return std::find(members.begin(), members.end(), rank_) - members.begin();
}

void DeviceMesh::flatten(const std::vector<std::string>& dims, const std::string& name) {
  flattened_[name] = dims;
  dims_of(name);  // validates the names
}

void DeviceMesh::create_groups(const c10::intrusive_ptr<c10d::Store>& store, std::chrono::milliseconds timeout) {
  std::vector<std::string> all = names_;
  for (const auto& [name, _] : flattened_) all.push_back(name);
  for (const auto& name : all) {
    auto members = group_ranks(name);
    // The group's store prefix names its members, so disjoint groups along one dim never meet.
    auto id = fmt::format("mesh/{}/{}", name, fmt::join(members, "-"));
    groups_[name] = Communicator::create(store, id, int(local_rank(name)), int(members.size()), timeout);
  }
}

void DeviceMesh::create_local_groups(std::chrono::milliseconds timeout) {
  std::vector<std::string> all = names_;
  for (const auto& [name, _] : flattened_) all.push_back(name);
  for (const auto& name : all) {
    if (group_ranks(name).size() != 1) throw std::logic_error(fmt::format("mesh dim '{}' has more than one rank", name));
    groups_[name] = Communicator::create_local(name, timeout);
  }
}

void DeviceMesh::set_timeouts(std::chrono::milliseconds timeout) {
  // groups_ is ordered by name, the same on every rank: the barriers meet in the same order.
  for (auto& [name, group] : groups_) {
    group->barrier();
    group->set_timeout(timeout);
  }
}

namespace {

// Every collective of every group, added up.
template <typename Groups>
CollectiveStats total_stats(const Groups& groups) {
  CollectiveStats total;
  for (const auto& [name, group] : groups) {
    for (const auto& [op, stats] : group->stats()) {
      total.calls += stats.calls;
      total.bytes += stats.bytes;
      total.seconds += stats.seconds;
    }
  }
  return total;
}

}  // namespace

int64_t DeviceMesh::comm_bytes() const { return total_stats(groups_).bytes; }

double DeviceMesh::comm_seconds() const { return total_stats(groups_).seconds; }

std::shared_ptr<Communicator> DeviceMesh::group(const std::string& dim) const {
  auto it = groups_.find(dim);
  if (it == groups_.end()) throw std::logic_error(fmt::format("device mesh has no group for '{}'", dim));
  return it->second;
}

}  // namespace ctitan::distributed
