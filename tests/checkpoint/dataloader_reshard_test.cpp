// Dataloader state across a change of data-parallel degree: the windows of the steps after the
// change are exactly the windows an unchanged run reads next, none skipped, none twice.
#include <gtest/gtest.h>

#include <set>

#include "checkpoint/thread_ranks.h"
#include "ctitan/checkpoint/reader.h"
#include "ctitan/checkpoint/sharded_save.h"
#include "ctitan/checkpoint/state_loader.h"
#include "ctitan/data/packed_loader.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::checkpoint {
namespace {

constexpr int64_t kSeqLen = 8, kBatch = 2;

data::PackedLoader loader(const std::string& path, int64_t batch, int dp_rank, int dp_degree) {
  return data::PackedLoader(data::open_token_stream(path, "auto", nullptr, "k"), kSeqLen, batch, "k", dp_rank,
                            dp_degree);
}

// First input token of each row; the token file makes it unique per window.
std::vector<int64_t> firsts(const data::Batch& b) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < b.inputs.size(0); ++i) out.push_back(b.inputs[i][0].item<int64_t>());
  return out;
}

// Saves `steps` batches' worth of state of `from` dp ranks, loads it into `to` ranks, and checks
// that each of the next two global batches is the next to * kBatch windows of one unsharded run.
void check_reshard(int from, int to, int steps) {
  testing::TempDir dir;
  auto path = dir.file("tokens.bin");
  // Window k starts at token 9k, whose id 9k mod 997 is distinct for every k < 997.
  testing::write_cyclic_token_file(path, 20000, 997, 1000);
  auto reference = loader(path, 1, 0, 1);
  std::vector<int64_t> order;  // first token of window 0, 1, 2, ...
  for (int i = 0; i < 200; ++i) order.push_back(firsts(reference.next())[0]);

  auto step_dir = dir.path() / "step-1";
  testing::ThreadGroup group(from);
  group.run([&](int rank, Coordinator& c) {
    auto l = loader(path, kBatch, rank, from);
    for (int s = 0; s < steps; ++s) l.next();
    SaveRequest request{step_dir, 1, false, "cfg", rank, from};
    save(c, request, local_slices({{"dataloader", l.state_dict()}}, {}, rank));
  });

  std::vector<data::PackedLoader> resumed;
  for (int rank = 0; rank < to; ++rank) {
    CheckpointReader reader(step_dir);
    std::map<std::string, StateDict> state = {{"dataloader", {}}};
    load_into(reader, state, {}, RankPlace{rank, to, rank, to}, {"dataloader"});
    resumed.push_back(loader(path, kBatch, rank, to));
    resumed.back().load_state_dict(state["dataloader"]);
  }
  size_t next = size_t(steps * kBatch * from);
  for (int s = 0; s < 2; ++s) {
    std::multiset<int64_t> got, want;
    for (auto& l : resumed) {
      for (auto f : firsts(l.next())) got.insert(f);
    }
    for (int64_t i = 0; i < to * kBatch; ++i) want.insert(order[next++]);
    EXPECT_EQ(got, want) << "step " << s + 1 << " after resharding " << from << " -> " << to;
  }
}

TEST(CheckpointDataloaderReshard, SameDegreeResumesEachRankExactly) { check_reshard(2, 2, 3); }
TEST(CheckpointDataloaderReshard, TwoRanksToThree) { check_reshard(2, 3, 3); }
TEST(CheckpointDataloaderReshard, ThreeRanksToTwo) { check_reshard(3, 2, 2); }
TEST(CheckpointDataloaderReshard, TwoRanksToOne) { check_reshard(2, 1, 5); }
TEST(CheckpointDataloaderReshard, OneRankToFour) { check_reshard(1, 4, 3); }

}  // namespace
}  // namespace ctitan::checkpoint
