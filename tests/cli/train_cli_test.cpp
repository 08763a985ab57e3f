// `ctitan train` run as a user runs it: exit codes, error lines, files on disk.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <fstream>
#include <sstream>

#include "support/processes.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

using testing::RunResult;
using testing::TempDir;
using testing::concat;
using testing::read_jsonl;

std::string last_output_line(const std::string& text) {
  auto end = text.find_last_not_of('\n');
  auto start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// A failed run: the expected exit code, and a last line "ctitan: ..." naming the culprit.
void expect_clean_failure(const RunResult& r, int exit_code, const std::string& needle) {
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  auto line = last_output_line(r.output);
  EXPECT_EQ(line.rfind("ctitan: ", 0), 0u) << r.output;
  EXPECT_NE(line.find(needle), std::string::npos) << "last line: " << line;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

TEST(CliTrain, TrainsAndWritesMetricsJsonl) {
  TempDir dir;
  auto r = testing::run_ctitan(concat({"train"}, concat(testing::tiny_job_args(dir.path()),
      {"--validation.enable", "--validation.freq", "30", "--validation.steps", "2"})));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> rows, validation;
  for (auto& row : read_jsonl(dir.file("metrics.jsonl"))) (row.contains("validation_loss") ? validation : rows).push_back(row);
  ASSERT_EQ(rows.size(), 6u);  // steps 10, 20, ..., 60
  ASSERT_EQ(validation.size(), 2u);  // steps 30 and 60, 2 batches of 4 x 32 tokens each
  EXPECT_EQ(validation[1]["step"], 60);
  EXPECT_EQ(validation[1]["validation_tokens"], 2 * 4 * 32);
  EXPECT_LT(validation[1]["validation_loss"].get<double>(), validation[0]["validation_loss"].get<double>());
  for (auto key : {"step", "loss", "grad_norm", "lr", "tps", "tflops", "mfu", "memory_active_bytes",
                   "memory_peak_bytes", "memory_rss_bytes", "time_step_s", "time_data_s"}) {
    EXPECT_TRUE(rows[0].contains(key)) << key;
  }
  EXPECT_EQ(rows.back()["step"], 60);
  EXPECT_LT(rows.back()["loss"].get<double>(), rows.front()["loss"].get<double>());
  EXPECT_GT(rows.back()["tps"].get<double>(), 0);
  EXPECT_GE(rows.back()["memory_peak_bytes"].get<int64_t>(), rows.back()["memory_active_bytes"].get<int64_t>());
  EXPECT_NE(r.output.find("step:    60"), std::string::npos) << r.output;
}

// Metrics hold no per-step tensors, so live memory at the step boundary is the
// same at step 100 and step 200 however rarely we log. The leak check runs every 50 steps too.
TEST(CliTrain, MemoryIsFlatUnderRareLogging) {
  TempDir dir;
  auto r = testing::run_ctitan(concat({"train"}, concat(testing::tiny_job_args(dir.path()),
                                      {"--training.steps", "200", "--metrics.log_freq", "100",
                                       "--debug.check_leaks", "true", "--training.housekeeping_freq", "50"})));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = read_jsonl(dir.file("metrics.jsonl"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["step"], 100);
  EXPECT_EQ(rows[1]["step"], 200);
  EXPECT_GT(rows[0]["memory_active_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(rows[0]["memory_active_bytes"], rows[1]["memory_active_bytes"]);
}

TEST(CliTrain, BadConfigFilesExitTwoNamingTheKey) {
  TempDir dir;
  auto base = testing::tiny_job_args(dir.path());
  testing::write_file(dir.file("malformed.toml"), "[training\nsteps = 3\n");
  expect_clean_failure(testing::run_ctitan(concat({"train", "--config", dir.file("malformed.toml")}, base)), 2,
                       "malformed.toml:1");
  testing::write_file(dir.file("unknown.toml"), "[training]\nsteps = 3\nbatchsize = 4\n");
  expect_clean_failure(testing::run_ctitan(concat({"train", "--config", dir.file("unknown.toml")}, base)), 2,
                       "unknown key training.batchsize");
  testing::write_file(dir.file("type.toml"), "[training]\nsteps = \"many\"\n");
  expect_clean_failure(testing::run_ctitan({"train", "--config", dir.file("type.toml")}), 2,
                       "training.steps must be an integer");
  expect_clean_failure(testing::run_ctitan(concat({"train"}, concat(base, {"--training.global_batch_size", "6"}))), 2,
                       "training.global_batch_size");
}

// Issue #17: `--config <a directory>` read as an empty config and failed later with
// "training.dataset_path is not set". A directory, a missing, empty or unreadable path is refused
// while the command line is parsed: one line naming the flag and the path, exit 2.
TEST(CliTrain, ConfigPathThatIsNotAReadableFileExitsTwoNamingIt) {
  TempDir dir;
  auto base = testing::tiny_job_args(dir.path());
  auto expect_one_line = [](const RunResult& r, const std::string& needle) {
    expect_clean_failure(r, 2, needle);
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
  };
  expect_one_line(testing::run_ctitan(concat({"train", "--config", dir.path().string()}, base)),
                  "train: --config: " + dir.path().string() + " is a directory, not a TOML file");
  expect_one_line(testing::run_ctitan(concat({"train", "--config", dir.file("missing.toml")}, base)),
                  "--config: " + dir.file("missing.toml") + " does not exist");
  expect_one_line(testing::run_ctitan(concat({"train", "--config", ""}, base)), "--config: the path is empty");
  // #34: a FIFO blocked forever (opening one waits for a writer), /dev/zero grew memory unbounded.
  const auto fifo = dir.file("config.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_one_line(testing::run_ctitan(concat({"train", "--config", fifo}, base), 30),
                  "--config: " + fifo + " is not a regular file (a FIFO)");
  expect_one_line(testing::run_ctitan(concat({"train", "--config", "/dev/zero"}, base), 30),
                  "--config: /dev/zero is not a regular file (a character device)");
  // The same check on every command that takes a job config.
  expect_one_line(testing::run_ctitan({"checkpoint", "import", "--input", dir.file("x"), "--output", dir.file("y"),
                                       "--config", dir.path().string()}),
                  "checkpoint import: --config: " + dir.path().string() + " is a directory");
  expect_one_line(testing::run_ctitan({"generate", "--checkpoint", dir.file("x"), "--config", dir.path().string()}),
                  "generate: --config: " + dir.path().string() + " is a directory");
  expect_one_line(testing::run_ctitan({"estimate", "--config", dir.path().string()}),
                  "estimate: --config: " + dir.path().string() + " is a directory");
  // Root reads any file whatever its mode: the unreadable case is checked only for other users.
  if (geteuid() != 0) {
    testing::write_file(dir.file("secret.toml"), "[training]\nsteps = 3\n");
    std::filesystem::permissions(dir.file("secret.toml"), std::filesystem::perms::none);
    expect_one_line(testing::run_ctitan(concat({"train", "--config", dir.file("secret.toml")}, base)),
                    "--config: " + dir.file("secret.toml") + " cannot be read: Permission denied");
  }
}

// Issue #17: command-line parse errors exited with CLI11's codes (104, 105, 106, 114) and printed
// two lines. Every one is now exit 2 (as documented for usage errors) and one line naming the
// flag and the command whose --help to read; --help and --version still exit 0.
TEST(CliUsage, ParseErrorsExitTwoWithOneLineNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "ctitan: A subcommand is required; see ctitan --help"},
      {{"--nope"}, "ctitan: unexpected argument '--nope'"},
      {{"frobnicate"}, "frobnicate"},
      {{"checkpoint"}, "ctitan: checkpoint: A subcommand is required; see ctitan checkpoint --help"},
      {{"checkpoint", "export", "--output", "x"}, "ctitan: checkpoint export: --input is required"},
      {{"checkpoint", "export", "--input"}, "ctitan: checkpoint export: --input: 1 required"},
      {{"checkpoint", "import", "--input", "a", "--output", "b", "--bogus"}, "--bogus"},
      {{"run", "--nnodes", "abc", "train"}, "ctitan: run: --nnodes 'abc' is not N or MIN:MAX"},
      {{"generate", "--checkpoint", "x", "--max-new-tokens", "x"},
       "ctitan: generate: --max-new-tokens: 'x' is not a non-negative number; see ctitan generate --help"},
      {{"generate", "--checkpoint", "x", "--temperature", "nan"}, "--temperature: 'nan' is not a non-negative number"},
      {{"generate", "--checkpoint", "x", "--prompt", "a", "--prompt-ids", "1"}, "--prompt"},
      {{"train", "--config"}, "ctitan: train: --config: 1 required"},
  };
  for (const auto& [args, needle] : cases) {
    auto r = testing::run_ctitan(args);
    std::string command = "ctitan";
    for (const auto& a : args) command += " " + a;
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
    EXPECT_EQ(r.output.rfind("ctitan: ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  }
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--help"}, {"--version"},
                                               {"checkpoint", "--help"}, {"train", "--help"}}) {
    auto r = testing::run_ctitan(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.output;
    EXPECT_GT(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

TEST(CliTrain, BadDataExitsNonZeroNamingTheFile) {
  TempDir dir;
  auto base = testing::tiny_job_args(dir.path());
  expect_clean_failure(
      testing::run_ctitan(concat({"train"}, concat(base, {"--training.dataset_path", dir.file("none.txt")}))), 1,
      "none.txt' does not exist");
  testing::write_file(dir.file("empty.bin"), "");
  expect_clean_failure(
      testing::run_ctitan(concat({"train"}, concat(base, {"--training.dataset_path", dir.file("empty.bin")}))), 1,
      "empty.bin is not a ctitan token file");
  testing::write_cyclic_token_file(dir.file("short.bin"), 20, 16, 32);
  expect_clean_failure(
      testing::run_ctitan(concat({"train"}, concat(base, {"--training.dataset_path", dir.file("short.bin")}))), 1,
      "has 20 tokens, fewer than seq_len + 1 = 33");
}

TEST(CliTrain, CorruptTokenizerExitsNonZeroNamingTheFile) {
  TempDir dir;
  auto base = testing::tiny_job_args(dir.path());
  testing::write_file(dir.file("tok.model"), "AA== 0\n!!!! 1\n");
  expect_clean_failure(
      testing::run_ctitan(concat({"train"}, concat(base, {"--model.tokenizer_path", dir.file("tok.model")}))), 1,
      "tok.model:2");
}

TEST(CliTokenizer, TrainEncodeDecodeRoundTrip) {
  TempDir dir;
  testing::write_file(dir.file("corpus.txt"), testing::generated_corpus(200, 30));
  auto r = testing::run_ctitan({"tokenizer", "train", "--input", dir.file("corpus.txt"), "--vocab-size", "300",
                                "--output", dir.file("sub/tok.model")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto enc = testing::run_ctitan({"tokenizer", "encode", "--tokenizer", dir.file("sub/tok.model"), "--text",
                                  "the cat sat"});
  ASSERT_EQ(enc.exit_code, 0) << enc.output;
  std::vector<std::string> args{"tokenizer", "decode", "--tokenizer", dir.file("sub/tok.model")};
  std::istringstream ids(enc.output);
  for (std::string id; ids >> id;) args.push_back(id);
  auto dec = testing::run_ctitan(args);
  EXPECT_EQ(dec.output, "the cat sat\n");
}

TEST(CliData, PrepareWritesATokenFileThatTrains) {
  TempDir dir;
  testing::write_file(dir.file("corpus.txt"), testing::generated_corpus(300, 30));
  ASSERT_EQ(testing::run_ctitan({"tokenizer", "train", "--input", dir.file("corpus.txt"), "--vocab-size", "300",
                                 "--output", dir.file("tok.model")}).exit_code, 0);
  auto r = testing::run_ctitan({"data", "prepare", "--input", dir.file("corpus.txt"), "--tokenizer",
                                dir.file("tok.model"), "--output", dir.file("corpus.bin")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto train = testing::run_ctitan(concat({"train"}, concat(testing::tiny_job_args(dir.path()),
      {"--training.dataset_path", dir.file("corpus.bin"), "--model.vocab_size", "300", "--training.steps", "3"})));
  EXPECT_EQ(train.exit_code, 0) << train.output;
}

// Progress bars appear only when stderr is a terminal: under a pseudo-terminal (Python's pty
// module, tests/cli/run_in_pty.py) tokenizer training and data prepare draw "\r[###...] n/N
// merges" and "\rN tokens"; through pipes, as here and under `ctitan run`, they print nothing.
TEST(CliProgress, BarsOnlyWhenStderrIsATerminal) {
  if (!testing::have_python()) GTEST_SKIP() << "no venv Python for the pty helper";
  TempDir dir;
  testing::write_file(dir.file("corpus.txt"), testing::generated_corpus(300, 30));
  const std::vector<std::string> tokenizer_train = {"tokenizer", "train", "--input", dir.file("corpus.txt"),
                                                    "--vocab-size", "300", "--output", dir.file("tok.model"),
                                                    "--overwrite"};
  const std::vector<std::string> prepare = {"data", "prepare", "--input", dir.file("corpus.txt"), "--tokenizer",
                                            dir.file("tok.model"), "--output", dir.file("corpus.bin"), "--overwrite"};
  const std::string pty = std::string(CTITAN_SOURCE_DIR) + "/tests/cli/run_in_pty.py";
  auto at_terminal = testing::run_python(concat({pty, CTITAN_BIN}, tokenizer_train));
  ASSERT_EQ(at_terminal.exit_code, 0) << at_terminal.output;
  EXPECT_NE(at_terminal.output.find("\r[##############################] 42/42 merges"), std::string::npos)
      << at_terminal.output;
  auto prepared = testing::run_python(concat({pty, CTITAN_BIN}, prepare));
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  EXPECT_NE(prepared.output.find(" tokens\r\n"), std::string::npos) << prepared.output;

  auto piped = testing::run_ctitan(tokenizer_train);
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_EQ(piped.output.find("merges"), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\r'), std::string::npos) << piped.output;
  piped = testing::run_ctitan(prepare);
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_EQ(piped.output.find('\r'), std::string::npos) << piped.output;
}

// Two runs on one job.dump_folder used to both exit 0, the first run's metrics and checkpoints
// lost. The second is refused, naming the first; and a run killed with -9 leaves no stale lock.
TEST(CliTrain, ASecondRunOnTheSameDumpFolderIsRefusedNamingTheFirst) {
  TempDir dir;
  const auto lock_file = dir.file(".ctitan.lock");
  const pid_t first = testing::spawn_ctitan(concat({"train"}, concat(testing::tiny_job_args(dir.path()),
                                                                     {"--training.steps", "1000000"})),
                                            dir.file("first.log"));
  const bool holding = testing::wait_until([&] {
    std::ifstream in(lock_file);
    std::string text;
    std::getline(in, text);
    return text.rfind("pid ", 0) == 0;
  }, 60);
  if (!holding) {
    kill(first, SIGKILL);
    testing::wait_exit(first, 30);
    FAIL() << "the first run never took the lock";
  }
  auto second = testing::run_ctitan(concat({"train"}, testing::tiny_job_args(dir.path())));
  expect_clean_failure(second, 2, "job.dump_folder '" + dir.path().string() + "' is in use by another run (pid " +
                                      std::to_string(first) + " on ");
  EXPECT_FALSE(testing::process_gone(first)) << "the refused run must leave the first one running";
  kill(first, SIGKILL);
  EXPECT_EQ(testing::wait_exit_or_kill(first, 30), 128 + SIGKILL);
  // The kernel dropped the dead run's lock: the next run on the folder trains.
  auto third = testing::run_ctitan(concat({"train"}, concat(testing::tiny_job_args(dir.path()), {"--training.steps", "2"})));
  EXPECT_EQ(third.exit_code, 0) << third.output;
}

}  // namespace
}  // namespace ctitan
