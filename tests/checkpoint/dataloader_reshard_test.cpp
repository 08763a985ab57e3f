// Dataloader state across a change of data-parallel degree: the windows of the steps after the
// change are exactly the windows an unchanged run reads next, none skipped, none twice.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "checkpoint/thread_ranks.h"
#include "ctitan/checkpoint/reader.h"
#include "ctitan/checkpoint/sharded_save.h"
#include "ctitan/checkpoint/state_loader.h"
#include "ctitan/data/bpe_trainer.h"
#include "ctitan/data/mixture_stream.h"
#include "ctitan/data/packed_loader.h"
#include "support/parquet_files.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::checkpoint {
namespace {

constexpr int64_t kSeqLen = 8, kBatch = 2;

// A loader of one dataset for dp rank `rank` of `degree`.
using LoaderFactory = std::function<data::PackedLoader(int64_t batch, int rank, int degree)>;

LoaderFactory token_file(const std::string& path) {
  return [path](int64_t batch, int rank, int degree) {
    return data::PackedLoader(data::open_token_stream(path, "auto", nullptr, "k"), kSeqLen, batch, "k", rank, degree);
  };
}

// Each row of a batch, whole: windows of text can repeat, so they are compared as multisets.
std::vector<std::vector<int64_t>> window_rows(const data::Batch& b) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < b.inputs.size(0); ++i) {
    auto row = b.inputs[i].contiguous();
    out.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
  }
  return out;
}

// Saves `steps` batches' worth of state of `from` dp ranks, loads it into `to` ranks, and checks
// that each of the next two global batches is the next to * kBatch windows of one unsharded run.
void check_reshard(const LoaderFactory& make, int from, int to, int steps) {
  testing::TempDir dir;
  auto reference = make(1, 0, 1);
  std::vector<std::vector<int64_t>> order;  // window 0, 1, 2, ...
  for (int i = 0; i < 200; ++i) order.push_back(window_rows(reference.next())[0]);

  auto step_dir = dir.path() / "step-1";
  testing::ThreadGroup group(from);
  group.run([&](int rank, Coordinator& c) {
    auto l = make(kBatch, rank, from);
    for (int s = 0; s < steps; ++s) l.next();
    SaveRequest request{step_dir, 1, false, "cfg", rank, from};
    save(c, request, local_slices({{"dataloader", l.state_dict()}}, {}, rank));
  });

  std::vector<data::PackedLoader> resumed;
  for (int rank = 0; rank < to; ++rank) {
    CheckpointReader reader(step_dir);
    std::map<std::string, StateDict> state = {{"dataloader", {}}};
    load_into(reader, state, {}, RankPlace{rank, to, rank, to}, {"dataloader"});
    resumed.push_back(make(kBatch, rank, to));
    resumed.back().load_state_dict(state["dataloader"]);
  }
  size_t next = size_t(steps * kBatch * from);
  for (int s = 0; s < 2; ++s) {
    std::multiset<std::vector<int64_t>> got, want;
    for (auto& l : resumed) {
      for (auto& row : window_rows(l.next())) got.insert(row);
    }
    for (int64_t i = 0; i < to * kBatch; ++i) want.insert(order[next++]);
    EXPECT_EQ(got, want) << "step " << s + 1 << " after resharding " << from << " -> " << to;
  }
}

void check_reshard(int from, int to, int steps) {
  testing::TempDir dir;
  auto path = dir.file("tokens.bin");
  testing::write_cyclic_token_file(path, 20000, 997, 1000);
  check_reshard(token_file(path), from, to, steps);
}

// Parquet shards, and a weighted mixture of them with a JSONL file: documents, tokenized.
class CheckpointDataloaderReshardDocuments : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = testing::parquet_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    std::filesystem::create_directories(dir_.path() / "shards");
    nlohmann::json specs = nlohmann::json::array();
    std::string jsonl;
    auto pieces = testing::utf8_pieces(testing::make_corpus()[0] + testing::make_corpus()[1], 90);
    for (int shard = 0; shard < 2; ++shard) {
      nlohmann::json texts = nlohmann::json::array();
      for (size_t i = size_t(shard); i < pieces.size(); i += 3) texts.push_back(pieces[i]);
      specs.push_back({{"path", dir_.file("shards/" + std::to_string(shard) + ".parquet")}, {"rows", texts},
                       {"row_group_size", 9}});
    }
    for (size_t i = 2; i < pieces.size(); i += 3) jsonl += nlohmann::json{{"text", pieces[i]}}.dump() + "\n";
    testing::write_file(dir_.file("docs.jsonl"), jsonl);
    testing::write_parquet_files(specs, dir_.path());
    tokenizer_ = std::make_shared<const data::Tokenizer>(data::train_bpe(testing::make_corpus(), {300}));
  }

  LoaderFactory parquet() {
    return [this](int64_t batch, int rank, int degree) {
      return data::PackedLoader(data::open_token_stream(dir_.file("shards"), "auto", tokenizer_, "k"), kSeqLen, batch,
                                "k", rank, degree);
    };
  }

  LoaderFactory mixture() {
    return [this](int64_t batch, int rank, int degree) {
      std::vector<data::MixtureSource> sources;
      sources.push_back({"shards", "a", "shards", data::open_token_stream(dir_.file("shards"), "auto", tokenizer_, "a"), 3});
      sources.push_back({"docs", "b", "docs", data::open_token_stream(dir_.file("docs.jsonl"), "auto", tokenizer_, "b"), 1});
      return data::PackedLoader(std::make_unique<data::MixtureStream>(std::move(sources), 9), kSeqLen, batch, "m", rank,
                                degree);
    };
  }

  testing::TempDir dir_;
  std::shared_ptr<const data::Tokenizer> tokenizer_;
};

TEST(CheckpointDataloaderReshard, SameDegreeResumesEachRankExactly) { check_reshard(2, 2, 3); }
TEST(CheckpointDataloaderReshard, TwoRanksToThree) { check_reshard(2, 3, 3); }
TEST(CheckpointDataloaderReshard, ThreeRanksToTwo) { check_reshard(3, 2, 2); }
TEST(CheckpointDataloaderReshard, TwoRanksToOne) { check_reshard(2, 1, 5); }
TEST(CheckpointDataloaderReshard, OneRankToFour) { check_reshard(1, 4, 3); }

}  // namespace
}  // namespace ctitan::checkpoint

namespace ctitan::checkpoint {
namespace {

TEST_F(CheckpointDataloaderReshardDocuments, ParquetShardsReshardTwoToThreeAndThreeToOne) {
  check_reshard(parquet(), 2, 2, 3);
  check_reshard(parquet(), 2, 3, 3);
  check_reshard(parquet(), 3, 1, 4);
}

TEST_F(CheckpointDataloaderReshardDocuments, AMixtureReshardsTwoToThreeAndThreeToOne) {
  check_reshard(mixture(), 2, 2, 3);
  check_reshard(mixture(), 2, 3, 3);
  check_reshard(mixture(), 3, 1, 4);
}

}  // namespace
}  // namespace ctitan::checkpoint
