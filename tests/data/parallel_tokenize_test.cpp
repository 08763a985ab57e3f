// Parallel tokenization gives the serial result, in order, whatever the number of workers, and
// a reader error stops it cleanly (workers joined, the error passed on).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ctitan/common/error.h"
#include "ctitan/data/bpe_trainer.h"
#include "ctitan/data/parallel_tokenize.h"
#include "ctitan/data/token_stream.h"
#include "support/test_support.h"

namespace ctitan::data {
namespace {

using testing::TempDir;

std::vector<std::vector<int32_t>> tokenize(const std::vector<DatasetFile>& files, const Tokenizer& tok, int workers,
                                           TokenizeCounts* counts) {
  std::vector<std::vector<int32_t>> out;
  *counts = tokenize_in_order(files, {}, tok, workers, [&](const std::vector<int32_t>& ids) { out.push_back(ids); });
  return out;
}

TEST(ParallelTokenize, AnyWorkerCountGivesTheSerialDocumentsInOrder) {
  TempDir dir;
  Tokenizer tok = train_bpe(testing::make_corpus(), {500});
  // Many small documents (about 6 MiB: several 1 MiB batches per worker, so completion order
  // differs from input order) plus blank ones, which are counted, not emitted.
  std::string jsonl;
  std::vector<std::vector<int32_t>> expected;
  int64_t n_docs = 0;
  for (int copy = 0; copy < 30; ++copy) {
    for (const auto& doc : testing::make_corpus()) {
      for (const auto& piece : testing::utf8_pieces(doc, size_t(400 + copy))) {
        jsonl += nlohmann::json{{"text", piece}}.dump() + "\n";
        // A doc's last piece can be a lone separator: blank, counted but not emitted.
        if (auto ids = encode_document(tok, piece)) expected.push_back(*ids);
        ++n_docs;
      }
      jsonl += "{\"text\": \"  \\n\"}\n";
      ++n_docs;
    }
  }
  testing::write_file(dir.file("d.jsonl"), jsonl);
  auto files = list_dataset_files(dir.file("d.jsonl"), "auto", "--input");
  for (int workers : {1, 2, 3, 5}) {
    SCOPED_TRACE(workers);
    TokenizeCounts counts;
    auto got = tokenize(files, tok, workers, &counts);
    EXPECT_EQ(counts.documents, n_docs);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t d = 0; d < got.size(); ++d) ASSERT_TRUE(got[d] == expected[d]) << "document " << d;
  }
}

TEST(ParallelTokenize, AReaderErrorStopsTheWorkersAndIsRaised) {
  TempDir dir;
  Tokenizer tok = train_bpe(testing::make_corpus(), {300});
  std::string jsonl;
  const auto corpus = testing::make_corpus();
  for (int i = 0; i < 3000; ++i) jsonl += nlohmann::json{{"text", testing::utf8_pieces(corpus[i % 20], 900)[0]}}.dump() + "\n";
  jsonl += "not json\n";
  testing::write_file(dir.file("d.jsonl"), jsonl);
  auto files = list_dataset_files(dir.file("d.jsonl"), "auto", "--input");
  TokenizeCounts counts;
  try {
    tokenize(files, tok, 2, &counts);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("d.jsonl:3001"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctitan::data
