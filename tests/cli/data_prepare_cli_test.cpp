// `ctitan data prepare` as a user runs it: the token file does not depend on the number of
// workers or on the compression of the input.
#include <gtest/gtest.h>
#include <zstd.h>

#include <nlohmann/json.hpp>

#include "ctitan/data/bpe_trainer.h"
#include "support/test_support.h"

namespace ctitan {
namespace {

using testing::run_ctitan;
using testing::TempDir;

TEST(CliDataPrepare, WorkersAndCompressionDoNotChangeTheTokenFile) {
  TempDir dir;
  data::train_bpe(testing::make_corpus(), {400}).save(dir.file("tok.model"));
  std::string jsonl;
  for (int copy = 0; copy < 4; ++copy) {
    for (const auto& doc : testing::make_corpus()) jsonl += nlohmann::json{{"text", doc}}.dump() + "\n";
  }
  testing::write_file(dir.file("c.jsonl"), jsonl);
  std::string frame(ZSTD_compressBound(jsonl.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), jsonl.data(), jsonl.size(), 3));
  testing::write_file(dir.file("c.jsonl.zst"), frame);

  auto prepare = [&](const std::string& input, const std::string& workers, const std::string& output) {
    auto r = run_ctitan({"data", "prepare", "--input", dir.file(input), "--tokenizer", dir.file("tok.model"),
                         "--output", dir.file(output), "--workers", workers});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("from 80 documents"), std::string::npos) << r.output;
    return testing::read_file(dir.file(output));
  };
  const std::string serial = prepare("c.jsonl", "1", "serial.bin");
  EXPECT_GT(serial.size(), 16u + 4u * 80u);
  EXPECT_EQ(prepare("c.jsonl", "2", "two.bin"), serial);
  EXPECT_EQ(prepare("c.jsonl.zst", "2", "zst.bin"), serial);

  auto bad = run_ctitan({"data", "prepare", "--input", dir.file("c.jsonl"), "--tokenizer", dir.file("tok.model"),
                         "--output", dir.file("x.bin"), "--workers", "0"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--workers must be from 1 to 1024 (got 0)"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace ctitan
