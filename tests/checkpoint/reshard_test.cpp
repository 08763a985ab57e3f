// Resharding at unit level: synthetic row-sharded state saved by simulated ranks (threads) in one
// layout and loaded into another, compared bitwise with the global tensors.
#include <gtest/gtest.h>

#include "checkpoint/thread_ranks.h"
#include "ctitan/checkpoint/reader.h"
#include "ctitan/checkpoint/sharded_save.h"
#include "ctitan/checkpoint/state_loader.h"
#include "ctitan/common/error.h"
#include "support/test_support.h"

namespace ctitan::checkpoint {
namespace {

// Rows per shard (uneven, zeros allowed) and how many replicas hold each shard (HSDP).
struct Layout {
  std::vector<int64_t> rows;
  int replicas = 1;
  int world() const { return int(rows.size()) * replicas; }
};

// The global state every layout cuts up: 7-row tensors (sharded) plus whole scalars.
struct Global {
  torch::Tensor w = torch::randn({7, 3}, torch::TensorOptions().dtype(torch::kFloat));
  torch::Tensor b = torch::randn({7}, torch::TensorOptions().dtype(torch::kFloat));
  torch::Tensor m = torch::randn({7, 3}, torch::TensorOptions().dtype(torch::kFloat));
  torch::Tensor step = torch::tensor(int64_t(42));
};

torch::Tensor rng_of(int rank) { return torch::full({5}, rank + 1, torch::kByte); }

// Rank `rank`'s state and layouts under `layout` (rank = replica * shards + shard).
std::pair<std::map<std::string, StateDict>, std::map<std::string, ShardLayouts>> rank_state(
    const Global& g, const Layout& layout, int rank, bool zeros) {
  const int shard = rank % int(layout.rows.size());
  int64_t offset = 0;
  for (int s = 0; s < shard; ++s) offset += layout.rows[size_t(s)];
  const int64_t n = layout.rows[size_t(shard)];
  auto cut = [&](const torch::Tensor& t) { return zeros ? torch::zeros_like(t.narrow(0, offset, n)) : t.narrow(0, offset, n).clone(); };
  std::map<std::string, StateDict> state = {
      {"model", {{"w", cut(g.w)}, {"b", cut(g.b)}}},
      {"optimizer", {{"state.w.exp_avg", cut(g.m)}, {"state.w.step", zeros ? torch::zeros_like(g.step) : g.step.clone()}}},
      {"rng", {{"cpu", zeros ? torch::zeros({5}, torch::kByte) : rng_of(rank)}}},
  };
  std::map<std::string, ShardLayouts> layouts = {
      {"model", {{"w", {{7, 3}, {offset}}}, {"b", {{7}, {offset}}}}},
      {"optimizer", {{"state.w.exp_avg", {{7, 3}, {offset}}}}},
  };
  return {state, layouts};
}

void save_with(const Global& g, const Layout& layout, const std::filesystem::path& dir) {
  testing::ThreadGroup group(layout.world());
  group.run([&](int rank, Coordinator& c) {
    auto [state, layouts] = rank_state(g, layout, rank, false);
    SaveRequest request{dir, 3, false, "toml", rank / int(layout.rows.size()), layout.replicas};
    save(c, request, local_slices(state, layouts, rank));
  });
}

void expect_loads_into(const Global& g, const Layout& saved, const Layout& target, const std::filesystem::path& dir) {
  for (int rank = 0; rank < target.world(); ++rank) {
    auto [state, layouts] = rank_state(g, target, rank, true);
    auto [expected, unused] = rank_state(g, target, rank, false);
    CheckpointReader reader(dir);
    RankPlace place{rank, target.world(), rank / int(target.rows.size()), target.replicas};
    load_into(reader, state, layouts, place, {"model", "optimizer", "rng"});
    for (const auto& part : {"model", "optimizer"}) {
      for (const auto& [key, t] : expected[part]) {
        EXPECT_TRUE(torch::equal(state[part][key], t)) << part << "/" << key << " rank " << rank;
      }
    }
    // Per-rank state: a rank's own, or rank 0's for a rank the saving job did not have.
    EXPECT_TRUE(torch::equal(state["rng"]["cpu"], rng_of(rank < saved.world() ? rank : 0))) << "rank " << rank;
  }
}

TEST(CheckpointReshard, AnyLayoutLoadsIntoAnyOther) {
  const std::vector<Layout> layouts = {
      {{7}},              // one process
      {{3, 4, 0}},        // FSDP 3, uneven, a rank with no rows
      {{4, 3}},           // FSDP 2
      {{2, 5}, 2},        // HSDP: 2 replicas x 2 shards
      {{7}, 3},           // DDP 3: whole tensors on every rank
      {{0, 0, 7, 0}},     // all rows on one of 4 ranks
  };
  Global g;
  for (size_t s = 0; s < layouts.size(); ++s) {
    testing::TempDir dir;
    save_with(g, layouts[s], dir.path() / "step-3");
    for (size_t t = 0; t < layouts.size(); ++t) {
      SCOPED_TRACE("saved layout " + std::to_string(s) + ", loaded into layout " + std::to_string(t));
      expect_loads_into(g, layouts[s], layouts[t], dir.path() / "step-3");
    }
  }
}

// Each distinct slice is written once, by the lowest rank holding it; per-rank parts by every rank.
TEST(CheckpointReshard, ReplicatedSlicesAreWrittenOnce) {
  Global g;
  testing::TempDir dir;
  save_with(g, {{2, 5}, 2}, dir.path() / "step-3");
  CheckpointReader reader(dir.path() / "step-3");
  std::map<std::string, std::vector<std::string>> files_of;
  for (const auto& e : reader.metadata().entries) files_of[e.part + "/" + e.key].push_back(e.file);
  EXPECT_EQ(files_of["model/w"], (std::vector<std::string>{"rank-00000.bin", "rank-00001.bin"}));
  EXPECT_EQ(files_of["optimizer/state.w.step"], (std::vector<std::string>{"rank-00000.bin"}));
  EXPECT_EQ(files_of["rng/cpu"].size(), 4u);
  EXPECT_EQ(reader.metadata().world_size, 4);

  testing::TempDir ddp;
  save_with(g, {{7}, 3}, ddp.path() / "step-3");
  CheckpointReader ddp_reader(ddp.path() / "step-3");
  int model_slices = 0;
  for (const auto& e : ddp_reader.metadata().entries) model_slices += e.part == "model";
  EXPECT_EQ(model_slices, 2);  // w and b, once each, although 3 ranks hold them
}

// A slice that does not fit its declared layout is refused before anything is written.
TEST(CheckpointReshard, SliceOutsideItsLayoutIsAnError) {
  std::map<std::string, StateDict> state = {{"model", {{"w", torch::zeros({4, 3})}}}};
  std::map<std::string, ShardLayouts> layouts = {{"model", {{"w", {{7, 3}, {5}}}}}};
  EXPECT_THROW(local_slices(state, layouts, 1), InputError);
}

}  // namespace
}  // namespace ctitan::checkpoint
