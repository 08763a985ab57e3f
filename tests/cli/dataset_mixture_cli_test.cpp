// Parquet and mixtures end to end through `ctitan train`, `ctitan run` and `ctitan data prepare`:
// a weighted mixture of Parquet shards and a JSONL file trains, logs its per-source token counts,
// resumes bit for bit, and resumes from 2-rank FSDP and DDP checkpoints in one process as an
// uninterrupted one-process run trains; data prepare reads Parquet shards through a glob.
#include <gtest/gtest.h>

#include "ctitan/data/bpe_trainer.h"
#include "ctitan/data/token_file.h"
#include "ctitan/data/token_stream.h"
#include "support/parquet_files.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::dataset_mixture_test {
namespace {

namespace fs = std::filesystem;
using testing::concat;
using Args = std::vector<std::string>;
using nlohmann::json;

// Parquet shards and a JSONL file of corpus pieces, and a tokenizer, in `dir`; returns the texts
// of the shards in order (what data prepare must tokenize).
std::vector<std::string> write_datasets(const fs::path& dir) {
  fs::create_directories(dir / "shards");
  auto pieces = testing::utf8_pieces(testing::make_corpus()[2] + testing::make_corpus()[3], 120);
  json specs = json::array();
  std::vector<std::string> shard_texts;
  std::string jsonl;
  for (int shard = 0; shard < 2; ++shard) {
    json rows = json::array();
    for (size_t i = size_t(shard); i < pieces.size(); i += 3) {
      rows.push_back(pieces[i]);
      shard_texts.push_back(pieces[i]);
    }
    specs.push_back({{"path", (dir / "shards" / ("part-" + std::to_string(shard) + ".parquet")).string()},
                     {"rows", rows}, {"row_group_size", 8}, {"compression", shard ? "zstd" : "snappy"}});
  }
  for (size_t i = 2; i < pieces.size(); i += 3) jsonl += json{{"text", pieces[i]}}.dump() + "\n";
  testing::write_file((dir / "docs.jsonl").string(), jsonl);
  testing::write_parquet_files(specs, dir);
  data::train_bpe(testing::make_corpus(), {300}).save((dir / "tok.model").string());
  return shard_texts;
}

const Args kCheckpointing = {"--checkpoint.enable", "true", "--metrics.log_freq", "1",
                             "--checkpoint.last_save_model_only", "false", "--training.steps", "20",
                             "--checkpoint.interval", "10"};

Args mixture_job(const fs::path& data, const fs::path& out) {
  const std::string datasets = "[{path = \"" + (data / "shards").string() + "\", weight = 3}, {path = \"" +
                               (data / "docs.jsonl").string() + "\", weight = 1}]";
  return concat(concat({"train"}, testing::tiny_job_args(out.string())),
                concat(kCheckpointing, {"--training.dataset_path", "", "--training.datasets", datasets,
                                        "--model.tokenizer_path", (data / "tok.model").string(), "--model.vocab_size", "300"}));
}

std::map<int64_t, json> rows_by_step(const fs::path& out) {
  std::map<int64_t, json> rows;
  for (const auto& row : testing::read_jsonl((out / "metrics.jsonl").string())) {
    if (row.contains("loss")) rows[row["step"].get<int64_t>()] = row;
  }
  return rows;
}

TEST(CliDatasetMixture, ParquetAndJsonlTrainLogTheirTokensAndResumeInEveryLayout) {
  if (auto why = testing::parquet_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir data, one, again, fsdp;
  write_datasets(data.path());

  auto reference = testing::run_ctitan(mixture_job(data.path(), one.path()));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  auto expected = rows_by_step(one.path());
  ASSERT_EQ(expected.size(), 20u);
  // Per-source counts: never decreasing, together at least every token the steps trained on
  // (4 windows of seq_len + 1 = 33 tokens a step; the rest waits in the loader's buffer), and
  // both sources drawn by the end (the JSONL file's share is 1/4 of the documents).
  int64_t previous_shards = 0, previous_docs = 0;
  for (const auto& [step, row] : expected) {
    ASSERT_TRUE(row.contains("data_tokens/shards") && row.contains("data_tokens/docs.jsonl")) << row.dump();
    const int64_t shards = row["data_tokens/shards"].get<int64_t>(), docs = row["data_tokens/docs.jsonl"].get<int64_t>();
    EXPECT_GE(shards + docs, step * 4 * 33) << "step " << step;
    EXPECT_GE(shards, previous_shards);
    EXPECT_GE(docs, previous_docs);
    previous_shards = shards;
    previous_docs = docs;
  }
  EXPECT_GT(previous_shards, 0);
  EXPECT_GT(previous_docs, 0);

  // One process resumed at step 10 of its own checkpoint: bit for bit.
  fs::copy(one.path() / "checkpoint", again.path() / "checkpoint", fs::copy_options::recursive);
  fs::remove_all(again.path() / "checkpoint" / "step-20");
  auto resumed = testing::run_ctitan(mixture_job(data.path(), again.path()));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(testing::first_logged_step(resumed.output), 11);
  auto got = rows_by_step(again.path());
  for (int64_t s = 11; s <= 20; ++s) {
    EXPECT_EQ(got[s]["loss"], expected[s]["loss"]) << "step " << s;
    EXPECT_EQ(got[s]["data_tokens/shards"], expected[s]["data_tokens/shards"]) << "step " << s;
  }

  // The checkpoint's mixture resumes only the same sources in the same order: swapped, or one
  // dataset instead, the run stops before training, naming what differs.
  const std::string swapped = "[{path = \"" + (data.path() / "docs.jsonl").string() + "\", weight = 1}, {path = \"" +
                              (data.path() / "shards").string() + "\", weight = 3}]";
  for (const auto& [change, says] : std::vector<std::pair<Args, std::string>>{
           {{"--training.datasets", swapped}, "training.datasets[0] '" + (data.path() / "docs.jsonl").string() +
                                                  "' is not the dataset the checkpoint's mixture read"},
           {{"--training.datasets", "[]", "--training.dataset_path", (data.path() / "shards").string()},
            "the data loader's state is a mixture's"}}) {
    testing::TempDir other;
    fs::copy(one.path() / "checkpoint", other.path() / "checkpoint", fs::copy_options::recursive);
    fs::remove_all(other.path() / "checkpoint" / "step-20");
    auto refused = testing::run_ctitan(concat(mixture_job(data.path(), other.path()), change));
    EXPECT_EQ(refused.exit_code, 1) << refused.output;
    EXPECT_NE(refused.output.find(says), std::string::npos) << refused.output;
  }

  // FSDP, then DDP, over 2 ranks (2 sequences each: the same global batch), resumed at step 10 in
  // one process. Both differ from one process only in summation order, so the loss agrees to 1e-4
  // relative (as CliCheckpoint's resharding tests argue), while a window read twice or skipped
  // moves it by percents.
  testing::TempDir ddp;
  for (const auto& [out, layout] : std::vector<std::pair<fs::path, Args>>{
           {fsdp.path(), {"--parallelism.data_parallel_shard_degree", "2"}},
           {ddp.path(), {"--parallelism.data_parallel_replicate_degree", "2", "--parallelism.data_parallel_shard_degree", "1"}}}) {
    auto sharded = testing::run_ctitan(concat({"run", "--nproc-per-node", "2", "--master-port", "0"},
        concat(mixture_job(data.path(), out), concat({"--training.local_batch_size", "2"}, layout))));
    ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
    fs::remove_all(out / "checkpoint" / "step-20");  // as if it had stopped after step 10
    auto continued = testing::run_ctitan(mixture_job(data.path(), out));
    ASSERT_EQ(continued.exit_code, 0) << continued.output;
    EXPECT_NE(continued.output.find("resumed from checkpoint"), std::string::npos) << continued.output;
    auto after = rows_by_step(out);
    for (int64_t s = 11; s <= 20; ++s) {
      const double want = expected[s]["loss"].get<double>();
      EXPECT_NEAR(after[s]["loss"].get<double>(), want, 1e-4 * want) << layout[0] << " step " << s;
      EXPECT_EQ(after[s]["data_tokens/shards"], expected[s]["data_tokens/shards"]) << layout[0] << " step " << s;
    }
  }
}

// data prepare over a glob of Parquet shards writes what the tokenizer makes of pyarrow's rows.
TEST(CliDatasetMixture, DataPrepareTokenizesParquetShardsThroughAGlob) {
  if (auto why = testing::parquet_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir dir;
  const auto texts = write_datasets(dir.path());
  auto r = testing::run_ctitan({"data", "prepare", "--input", dir.file("shards/part-*.parquet"), "--tokenizer",
                                dir.file("tok.model"), "--output", dir.file("shards.bin"), "--workers", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto tokenizer = data::Tokenizer::load(dir.file("tok.model"));
  std::vector<int32_t> want;
  for (const auto& text : texts) {
    if (auto ids = data::encode_document(tokenizer, text)) want.insert(want.end(), ids->begin(), ids->end());
  }
  data::TokenFileReader written(dir.file("shards.bin"));
  EXPECT_EQ(written.read(0, written.size()), want);

  // tokenizer train reads the text column it is told to, and names the one it cannot find.
  testing::write_file(dir.file("code.jsonl"), "{\"content\": \"def f(): return 1\"}\n{\"content\": \"x = f()\"}\n");
  auto trained = testing::run_ctitan({"tokenizer", "train", "--input", dir.file("code.jsonl"), "--text-column", "content",
                                      "--vocab-size", "270", "--output", dir.file("code.model")});
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
  auto wrong = testing::run_ctitan({"tokenizer", "train", "--input", dir.file("code.jsonl"), "--vocab-size", "270",
                                    "--output", dir.file("code2.model")});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_NE(wrong.output.find(dir.file("code.jsonl") + ":1: expected a JSON object with a string \"text\" field"),
            std::string::npos) << wrong.output;
}

}  // namespace
}  // namespace ctitan::dataset_mixture_test
