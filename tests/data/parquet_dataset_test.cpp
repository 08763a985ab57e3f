// Parquet datasets, read through Arrow's C++ reader, give exactly the rows pyarrow wrote (every
// compression, several row groups, null and empty texts), skip to any row as reading would, list
// as shards and globs, and are one InputError naming the file when they are not what they claim.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>

#include "ctitan/common/error.h"
#include "ctitan/data/bpe_trainer.h"
#include "ctitan/data/documents.h"
#include "ctitan/data/packed_loader.h"
#include "ctitan/data/parquet_documents.h"
#include "support/parquet_files.h"
#include "support/test_support.h"

namespace ctitan::data::parquet_dataset_test {
namespace {

using nlohmann::json;
using testing::TempDir;

#define SKIP_WITHOUT_PARQUET()                                          \
  if (auto why = testing::parquet_skip_reason(); !why.empty()) GTEST_SKIP() << why

// Texts as datasets hold them: several scripts, an empty text, a null every 7th row, a long one.
json parquet_rows(int n) {
  static const std::vector<std::string> pieces = [] {
    std::vector<std::string> out;
    for (const auto& doc : testing::make_corpus()) {
      for (auto& piece : testing::utf8_pieces(doc, 150)) out.push_back(piece);
    }
    return out;
  }();
  json rows = json::array();
  for (int i = 0; i < n; ++i) {
    if (i % 7 == 3) {
      rows.push_back(nullptr);
    } else if (i % 11 == 5) {
      rows.push_back("");
    } else if (i == 9) {  // one long document (about 30 KB) among short ones
      std::string text;
      for (size_t k = 0; k < 200; ++k) text += pieces[k];
      rows.push_back(text);
    } else {
      rows.push_back(pieces[size_t(i) * 31 % pieces.size()]);
    }
  }
  return rows;
}

// What the reader must return: each row's text, "" for a null.
std::vector<std::string> expected_parquet_documents(const json& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r.is_null() ? "" : r.get<std::string>());
  return out;
}

std::vector<std::string> read_parquet(const std::string& path, const std::string& column = "text") {
  std::vector<std::string> out;
  auto reader = open_parquet_documents(path, {column});
  while (auto doc = reader->next()) out.push_back(*doc);
  return out;
}

TEST(ParquetDataset, RowsReadAsPyarrowWroteThemInEveryCompression) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  const json rows = parquet_rows(100);
  json specs = json::array();
  for (std::string c : {"snappy", "zstd", "gzip", "none"}) {
    specs.push_back({{"path", dir.file(c + ".parquet")}, {"rows", rows}, {"row_group_size", 13}, {"compression", c}});
  }
  // Plain-encoded (no dictionary), Arrow's large_string, and a text column of another name.
  specs.push_back({{"path", dir.file("plain.parquet")}, {"rows", rows}, {"row_group_size", 13}, {"use_dictionary", false}});
  specs.push_back({{"path", dir.file("large.parquet")}, {"rows", rows}, {"type", "large_string"}});
  specs.push_back({{"path", dir.file("content.parquet")}, {"rows", rows}, {"column", "content"}});
  auto written = testing::write_parquet_files(specs, dir.path());
  ASSERT_EQ(written.size(), specs.size());
  const std::vector<std::string> compression = {"SNAPPY", "ZSTD", "GZIP", "UNCOMPRESSED"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(written[i]["num_row_groups"], 8) << "ceil(100 / 13) row groups";
    EXPECT_EQ(written[i]["compression"], compression[i]);
  }
  const auto want = expected_parquet_documents(rows);
  for (size_t i = 0; i + 1 < specs.size(); ++i) EXPECT_EQ(read_parquet(specs[i]["path"]), want) << specs[i]["path"];
  EXPECT_EQ(read_parquet(specs.back()["path"], "content"), want);
}

// Resuming calls skip(k) then next(): it must land on row k, across row groups and the end.
TEST(ParquetDataset, SkipLandsOnTheRowThatReadingWould) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  const json rows = parquet_rows(60);
  auto path = dir.file("s.parquet");
  testing::write_parquet_files(json::array({{{"path", path}, {"rows", rows}, {"row_group_size", 7}}}), dir.path());
  const auto want = expected_parquet_documents(rows);
  for (int64_t k = 0; k <= 62; ++k) {
    auto reader = open_parquet_documents(path, {});
    EXPECT_EQ(reader->skip(k), std::min<int64_t>(k, 60)) << k;
    auto doc = reader->next();
    if (k < 60) EXPECT_EQ(doc, want[size_t(k)]) << k;
    else EXPECT_FALSE(doc) << k;
  }
  // Skips after reads, inside and across row groups.
  auto reader = open_parquet_documents(path, {});
  int64_t at = 0;
  for (int64_t step : {2, 0, 5, 9, 1, 14}) {
    ASSERT_EQ(reader->skip(step), step);
    at += step;
    EXPECT_EQ(reader->next(), want[size_t(at)]) << at;
    ++at;
  }
}

TEST(ParquetDataset, ADirectoryOfShardsAndAGlobListTheShardsInOrder) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "shards");
  json specs = json::array();
  for (int i = 2; i >= 0; --i) {
    specs.push_back({{"path", dir.file("shards/part-0000" + std::to_string(i) + ".parquet")}, {"rows", parquet_rows(10 + i)}});
  }
  testing::write_parquet_files(specs, dir.path());
  // What a clone of a Hugging Face dataset holds beside its shards: hidden, so not data.
  std::filesystem::create_directories(dir.path() / "shards" / ".cache");
  std::filesystem::copy_file(dir.file("shards/part-00000.parquet"), dir.file("shards/.cache/part-00000.parquet"));
  testing::write_file(dir.file("shards/.gitattributes"), "*.parquet filter=lfs\n");
  for (auto [path, format] : {std::pair{dir.file("shards"), "auto"}, {dir.file("shards"), "parquet"},
                              {dir.file("shards/*.parquet"), "auto"}, {dir.file("shards/*"), "parquet"}}) {
    auto files = list_dataset_files(path, format, "training.dataset_path");
    ASSERT_EQ(files.size(), 3u) << path;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(files[i].path.filename().string(), "part-0000" + std::to_string(i) + ".parquet");
      EXPECT_EQ(files[i].format->name, "parquet");
    }
  }
  try {
    list_dataset_files(dir.file("shards/*.jsonl"), "auto", "training.dataset_path");
    FAIL() << "an empty glob was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("matches no files"), std::string::npos) << e.what();
  }
}

// Each bad file is one line naming it, whether the error comes from ctitan or from Arrow.
TEST(ParquetDataset, BadFilesAreOneLineNamingTheFile) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  const json rows = parquet_rows(20);
  testing::write_file(dir.file("text.parquet"), "{\"text\": \"JSON, not Parquet\"}\n");
  testing::write_file(dir.file("empty.parquet"), "");
  testing::write_parquet_files(
      json::array({{{"path", dir.file("content.parquet")}, {"rows", rows}, {"column", "content"}},
                   {{"path", dir.file("int.parquet")}, {"rows", rows}, {"type", "int64"}},
                   {{"path", dir.file("binary.parquet")}, {"rows", rows}, {"type", "binary"}},
                   {{"path", dir.file("list.parquet")}, {"rows", rows}, {"type", "list"}},
                   {{"path", dir.file("truncated.parquet")}, {"rows", rows}, {"truncate_bytes", 6}}}),
      dir.path());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"text.parquet", "not a readable Parquet file"},
      {"empty.parquet", "not a readable Parquet file"},
      {"content.parquet", "no text column 'text'; its columns: content, id"},
      {"int.parquet", "column 'text' holds"},
      {"binary.parquet", "column 'text' holds"},
      {"list.parquet", "column 'text' is nested (a list or a struct), not one string per row"},
      {"truncated.parquet", "not a readable Parquet file"},
  };
  // The string inside the list, named by its leaf's path: many values per row, refused too.
  try {
    read_parquet(dir.file("list.parquet"), "text.list.element");
    ADD_FAILURE() << "a list's element column was read as one document per row";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("column 'text.list.element' is inside a list"), std::string::npos) << e.what();
  }
  for (const auto& [name, says] : cases) {
    try {
      read_parquet(dir.file(name));
      ADD_FAILURE() << name << " was read";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("dataset error: " + dir.file(name) + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(says), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

// The loader over Parquet shards, stopped after k batches and resumed from its state in a new
// loader, gives exactly the batches of an uninterrupted one, from positions inside row groups.
TEST(ParquetDataset, TheLoaderResumesExactlyMidRowGroup) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "shards");
  testing::write_parquet_files(
      json::array({{{"path", dir.file("shards/a.parquet")}, {"rows", parquet_rows(40)}, {"row_group_size", 5}},
                   {{"path", dir.file("shards/b.parquet")}, {"rows", parquet_rows(33)}, {"row_group_size", 6},
                    {"compression", "zstd"}}}),
      dir.path());
  auto tokenizer = std::make_shared<const Tokenizer>(train_bpe(testing::make_corpus(), {300}));
  auto make = [&] {
    return PackedLoader(open_token_stream(dir.file("shards"), "auto", tokenizer, "k"), 16, 2, "k");
  };
  auto reference = make();
  std::vector<torch::Tensor> batches;
  for (int i = 0; i < 40; ++i) batches.push_back(reference.next().inputs);
  int mid_row_group = 0;
  for (int cut : {1, 6, 13, 22}) {
    auto first = make();
    for (int i = 0; i < cut; ++i) first.next();
    auto state = first.state_dict();
    const int64_t position = state["stream_position"].item<int64_t>();
    mid_row_group += position > 40 ? (position - 40) % 6 != 0 : position % 5 != 0;
    auto resumed = make();
    resumed.load_state_dict(state);
    for (int i = cut; i < cut + 8; ++i) EXPECT_TRUE(torch::equal(resumed.next().inputs, batches[size_t(i)])) << cut << " " << i;
  }
  EXPECT_GE(mid_row_group, 2) << "the cuts should fall inside row groups";
}

}  // namespace
}  // namespace ctitan::data::parquet_dataset_test
