// Compressed datasets stream through DocumentReader exactly as their plain text does, and data
// that is corrupt, truncated or not what its name says is one InputError naming the file.
#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <zlib.h>
#include <zstd.h>

#include <nlohmann/json.hpp>

#include "ctitan/common/error.h"
#include "ctitan/data/bpe_trainer.h"
#include "ctitan/data/byte_source.h"
#include "ctitan/data/documents.h"
#include "ctitan/data/token_stream.h"
#include "support/test_support.h"

namespace ctitan::data {
namespace {

using testing::TempDir;

// JSONL of the tokenizer corpus, each document split in three so there are many lines.
std::string jsonl_text(std::vector<std::string>* docs) {
  std::string text;
  for (const auto& doc : testing::make_corpus()) {
    for (const auto& piece : testing::utf8_pieces(doc, doc.size() / 3 + 1)) {
      docs->push_back(piece);
      text += nlohmann::json{{"text", piece}}.dump() + "\n";
    }
  }
  return text;
}

// Two gzip members, as `cat a.gz b.gz` makes: readers must not stop after the first.
void write_gzip(const std::string& path, const std::string& text) {
  size_t half = text.size() / 2;
  for (auto [begin, end, mode] : {std::tuple{size_t(0), half, "wb"}, std::tuple{half, text.size(), "ab"}}) {
    gzFile gz = gzopen(path.c_str(), mode);
    ASSERT_NE(gz, nullptr);
    ASSERT_EQ(gzwrite(gz, text.data() + begin, unsigned(end - begin)), int(end - begin));
    ASSERT_EQ(gzclose(gz), Z_OK);
  }
}

// Two zstd frames back to back, as `zstd` writes for concatenated inputs.
std::string zstd_frames(const std::string& text) {
  std::string out;
  size_t half = text.size() / 2;
  for (auto [begin, end] : {std::pair{size_t(0), half}, std::pair{half, text.size()}}) {
    std::string frame(ZSTD_compressBound(end - begin), '\0');
    size_t n = ZSTD_compress(frame.data(), frame.size(), text.data() + begin, end - begin, 3);
    EXPECT_FALSE(ZSTD_isError(n));
    out += frame.substr(0, n);
  }
  return out;
}

std::vector<std::string> read_all(const std::string& path, const std::string& format = "auto") {
  auto files = list_dataset_files(path, format, "--input");
  EXPECT_EQ(files.size(), 1u);
  return read_documents(files[0]);
}

TEST(CompressedDocuments, GzipAndZstdGiveThePlainDocuments) {
  TempDir dir;
  std::vector<std::string> docs;
  const std::string text = jsonl_text(&docs);
  testing::write_file(dir.file("c.jsonl"), text);
  write_gzip(dir.file("c.jsonl.gz"), text);
  testing::write_file(dir.file("c.jsonl.zst"), zstd_frames(text));
  EXPECT_EQ(read_all(dir.file("c.jsonl")), docs);
  EXPECT_EQ(read_all(dir.file("c.jsonl.gz")), docs);
  EXPECT_EQ(read_all(dir.file("c.jsonl.zst")), docs);
  // strfile text inside compression: the name inside (.txt) decides the format.
  const std::string strfile = "one\n%\ntwo\nlines\n%\nthree\n";
  testing::write_file(dir.file("f.txt.zst"), zstd_frames(strfile));
  EXPECT_EQ(read_all(dir.file("f.txt.zst")), (std::vector<std::string>{"one\n", "two\nlines\n", "three\n"}));
}

TEST(CompressedDocuments, DirectoriesMixCompressedAndPlainFiles) {
  TempDir dir;
  testing::write_file(dir.file("a.jsonl"), "{\"text\": \"plain\"}\n");
  testing::write_file(dir.file("b.jsonl.zst"), zstd_frames("{\"text\": \"zstd\"}\n"));
  write_gzip(dir.file("c.jsonl.gz"), "{\"text\": \"gzip\"}\n");
  auto files = list_dataset_files(dir.path().string(), "auto", "--input");
  ASSERT_EQ(files.size(), 3u);
  std::vector<std::string> all;
  for (const auto& file : files) {
    for (auto& d : read_documents(file)) all.push_back(d);
  }
  EXPECT_EQ(all, (std::vector<std::string>{"plain", "zstd", "gzip"}));
}

// The training loader's stream over a compressed file: same chunks, and resuming at a document
// (reading forward through the decompressor) lands where the uninterrupted stream was.
TEST(CompressedDocuments, TokenStreamResumesInsideAZstdFile) {
  TempDir dir;
  std::vector<std::string> docs;
  const std::string text = jsonl_text(&docs);
  testing::write_file(dir.file("c.jsonl"), text);
  testing::write_file(dir.file("c.jsonl.zst"), zstd_frames(text));
  auto tok = std::make_shared<const Tokenizer>(train_bpe(testing::make_corpus(), {300}));
  auto plain = open_token_stream(dir.file("c.jsonl"), "auto", tok, "dataset");
  auto zst = open_token_stream(dir.file("c.jsonl.zst"), "auto", tok, "dataset");
  std::vector<std::vector<int32_t>> chunks;
  while (auto chunk = plain->next()) {
    chunks.push_back(*chunk);
    EXPECT_EQ(zst->next(), chunk);
  }
  EXPECT_FALSE(zst->next().has_value());
  ASSERT_GT(chunks.size(), 30u);
  zst->seek(29);
  EXPECT_EQ(zst->position(), 29);
  EXPECT_EQ(zst->next(), chunks[29]);
  EXPECT_THROW(zst->seek(int64_t(chunks.size()) + 1), InputError);
}

void expect_dataset_error(const std::string& path, const std::string& detail) {
  try {
    read_all(path);
    ADD_FAILURE() << path << " was read";
  } catch (const InputError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(detail), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(CompressedDocuments, BadDataIsOneLineNamingTheFile) {
  TempDir dir;
  std::vector<std::string> docs;
  const std::string text = jsonl_text(&docs);
  std::string zst = zstd_frames(text);
  testing::write_file(dir.file("cut.jsonl.zst"), zst.substr(0, zst.size() - 10));
  expect_dataset_error(dir.file("cut.jsonl.zst"), "truncated zstd");
  testing::write_file(dir.file("junk.jsonl.zst"), "this is not zstd at all\n");
  expect_dataset_error(dir.file("junk.jsonl.zst"), "corrupt zstd");
  testing::write_file(dir.file("plain.jsonl.gz"), "{\"text\": \"not gzip\"}\n");
  expect_dataset_error(dir.file("plain.jsonl.gz"), "not gzip");
  write_gzip(dir.file("full.jsonl.gz"), text);
  std::string gz = testing::read_file(dir.file("full.jsonl.gz"));
  testing::write_file(dir.file("cut.jsonl.gz"), gz.substr(0, gz.size() / 3));
  expect_dataset_error(dir.file("cut.jsonl.gz"), "truncated gzip");
  // A cut strfile text has no JSON line to break: only the gzip trailer tells.
  write_gzip(dir.file("full.txt.gz"), "one\n%\ntwo\n");
  std::string gz_text = testing::read_file(dir.file("full.txt.gz"));
  testing::write_file(dir.file("cut.txt.gz"), gz_text.substr(0, gz_text.size() - 6));
  expect_dataset_error(dir.file("cut.txt.gz"), "truncated gzip");
  // A bad line inside compressed JSONL still names its line.
  testing::write_file(dir.file("bad.jsonl.zst"), zstd_frames("{\"text\": \"ok\"}\n{\"txt\": 1}\n"));
  expect_dataset_error(dir.file("bad.jsonl.zst"), ":2:");
  testing::write_file(dir.file("t.bin.zst"), zstd_frames("x"));
  EXPECT_THROW(list_dataset_files(dir.file("t.bin.zst"), "auto", "--input"), InputError);
}

// A text file with no newline (issue #17: /dev/zero grew memory to 11 GB) stops at the line
// bound, naming the file. The file is sparse: 300 MiB of zeros on disk cost nothing.
TEST(CompressedDocuments, ALineLongerThanTheBoundIsOneLineNamingTheFile) {
  TempDir dir;
  std::filesystem::path file = dir.file("zeros.txt");
  { std::ofstream create(file); }
  std::filesystem::resize_file(file, data::LineReader::kMaxLineBytes + (size_t(44) << 20));
  try {
    data::read_documents({file, data::find_dataset_format("text")});
    FAIL() << "a 300 MiB line was read";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "dataset error: " + file.string() +
                                         ": a line longer than 256 MiB (no newline): not a text dataset");
  }
}

}  // namespace
}  // namespace ctitan::data
