#include "ctitan/data/packed_loader.h"

#include <gtest/gtest.h>

#include "ctitan/common/error.h"
#include "ctitan/data/bpe_trainer.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::data {
namespace {

using ctitan::testing::TempDir;

std::shared_ptr<const Tokenizer> small_tokenizer() {
  static auto tok = std::make_shared<const Tokenizer>(
      train_bpe({ctitan::testing::generated_corpus(50, 20)}, BpeTrainOptions{300, false}));
  return tok;
}

PackedLoader text_loader(const std::string& path, int64_t seq_len, int64_t batch) {
  return PackedLoader(open_token_stream(path, "auto", small_tokenizer(), "training.dataset_path"), seq_len, batch,
                      "training.dataset_path '" + path + "'");
}

TEST(PackedLoader, LabelsAreInputsShiftedByOne) {
  TempDir dir;
  ctitan::testing::write_cyclic_token_file(dir.file("c.bin"), 1000, 16, 32);
  PackedLoader loader(open_token_stream(dir.file("c.bin"), "auto", nullptr, "k"), 8, 2, "c");
  auto batch = loader.next();
  EXPECT_TRUE(torch::equal(batch.inputs.slice(1, 1, 8), batch.labels.slice(1, 0, 7)));
  // Windows are 9 tokens long and do not overlap: the second row starts at token 9.
  EXPECT_EQ(batch.inputs[1][0].item<int64_t>(), 9);
}

// Resuming from a saved state continues at exactly the next token: the batches after the
// restore equal, bitwise, those of a loader that never stopped. Covers documents split across
// windows and an epoch boundary (the corpus is only a few windows long).
TEST(PackedLoader, ResumesAtExactlyTheNextToken) {
  TempDir dir;
  ctitan::testing::write_file(dir.file("corpus.txt"), ctitan::testing::generated_corpus(12, 15));
  auto uninterrupted = text_loader(dir.file("corpus.txt"), 24, 3);
  auto first = text_loader(dir.file("corpus.txt"), 24, 3);
  std::vector<Batch> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(uninterrupted.next());
  for (int i = 0; i < 5; ++i) first.next();
  auto state = first.state_dict();
  auto resumed = text_loader(dir.file("corpus.txt"), 24, 3);
  resumed.load_state_dict(state);
  for (int i = 5; i < 12; ++i) {
    auto batch = resumed.next();
    EXPECT_TRUE(torch::equal(batch.inputs, expected[size_t(i)].inputs)) << "batch " << i;
    EXPECT_TRUE(torch::equal(batch.labels, expected[size_t(i)].labels)) << "batch " << i;
  }
  EXPECT_GT(uninterrupted.epoch(), 0) << "the test should cross an epoch boundary";
}

TEST(PackedLoader, JsonlAndTokenFilesLoad) {
  TempDir dir;
  ctitan::testing::write_file(dir.file("d.jsonl"), "{\"text\": \"the cat sat on the mat\"}\n\n{\"text\": \"a dog\"}\n");
  auto loader = text_loader(dir.file("d.jsonl"), 4, 1);
  auto batch = loader.next();
  EXPECT_EQ(batch.inputs[0][0].item<int64_t>(), small_tokenizer()->bos_id());
}

TEST(PackedLoader, DataParallelRanksSplitTheGlobalWindowOrder) {
  TempDir dir;
  ctitan::testing::write_cyclic_token_file(dir.file("c.bin"), 5000, 97, 128);
  auto open = [&] { return open_token_stream(dir.file("c.bin"), "tokens", nullptr, "k"); };
  PackedLoader single(open(), 10, 4, "c");
  PackedLoader rank0(open(), 10, 2, "c", 0, 2), rank1(open(), 10, 2, "c", 1, 2);
  auto all = single.next().inputs;  // windows 0, 1, 2, 3
  auto r0 = rank0.next().inputs, r1 = rank1.next().inputs;  // windows 0, 2 and 1, 3
  EXPECT_TRUE(torch::equal(r0[0], all[0]) && torch::equal(r1[0], all[1]));
  EXPECT_TRUE(torch::equal(r0[1], all[2]) && torch::equal(r1[1], all[3]));
}

void expect_input_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    FAIL() << "no error; expected " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PackedLoader, BadDatasetsGiveClearErrors) {
  TempDir dir;
  expect_input_error([&] { text_loader(dir.file("missing.txt"), 8, 1); }, "does not exist");
  ctitan::testing::write_file(dir.file("empty.txt"), "");
  expect_input_error([&] { text_loader(dir.file("empty.txt"), 8, 1).next(); }, "has 0 tokens, fewer than seq_len + 1 = 9");
  ctitan::testing::write_file(dir.file("short.txt"), "the cat");
  expect_input_error([&] { text_loader(dir.file("short.txt"), 4096, 1).next(); }, "fewer than seq_len + 1 = 4097");
  ctitan::testing::write_file(dir.file("bad.jsonl"), "{\"text\": \"ok\"}\n{\"txt\": 1}\n");
  expect_input_error([&] { text_loader(dir.file("bad.jsonl"), 8, 1).next(); }, "bad.jsonl:2");
  std::filesystem::create_directories(dir.file("nothing"));
  ctitan::testing::write_file(dir.file("nothing/x.dat"), "binary");
  expect_input_error([&] { text_loader(dir.file("nothing"), 8, 1); }, "holds no usable files");
  ctitan::testing::write_cyclic_token_file(dir.file("big.bin"), 100, 50, 64);
  expect_input_error(
      [&] { PackedLoader(open_token_stream(dir.file("big.bin"), "auto", nullptr, "k"), 40, 1, "big", 0, 1, 32).next(); },
      "outside the model's vocabulary");
  ctitan::testing::write_file(dir.file("trunc.bin"), std::string("CTTOKS01\x20\0\0\0\0\0\0\0\x01\x02", 18));
  expect_input_error([&] { open_token_stream(dir.file("trunc.bin"), "auto", nullptr, "k"); }, "trunc.bin");
}

}  // namespace
}  // namespace ctitan::data
