// Checkpointing end to end through `ctitan train` and `ctitan run`: bitwise resume, resharding
// between layouts, kill-and-restart, SIGTERM, corruption, disk full, async, seed checkpoints.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <utility>

#include "ctitan/checkpoint/metadata.h"
#include "ctitan/checkpoint/reader.h"
#include "ctitan/checkpoint/retention.h"
#include "ctitan/data/token_file.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using testing::concat;
using testing::flip_byte;
using Args = std::vector<std::string>;

const Args kCheckpointing = {"--checkpoint.enable", "true", "--metrics.log_freq", "1",
                             "--checkpoint.last_save_model_only", "false", "--training.steps", "20",
                             "--checkpoint.interval", "10"};
const Args kDdp = {"--parallelism.data_parallel_replicate_degree", "2", "--parallelism.data_parallel_shard_degree", "1",
                   "--training.local_batch_size", "2"};
const Args kLauncher = {"run", "--nproc-per-node", "2", "--master-port", "0"};

testing::RunResult run_train(const fs::path& dir, const Args& extra) {
  return testing::run_ctitan(concat(concat({"train"}, testing::tiny_job_args(dir)), concat(kCheckpointing, extra)));
}

testing::RunResult train_ddp(const fs::path& dir, const Args& extra, const Args& launcher = {}) {
  return testing::run_ctitan(concat(concat(concat(kLauncher, launcher), concat({"train"}, testing::tiny_job_args(dir))),
                                    concat(concat(kCheckpointing, kDdp), extra)));
}

// step -> (loss, grad_norm) from metrics.jsonl.
std::map<int64_t, std::pair<double, double>> metrics(const fs::path& dir) {
  std::map<int64_t, std::pair<double, double>> out;
  for (const auto& row : testing::read_jsonl((dir / "metrics.jsonl").string())) {
    if (row.contains("loss")) out[row["step"].get<int64_t>()] = {row["loss"].get<double>(), row["grad_norm"].get<double>()};
  }
  return out;
}

fs::path step_dir(const fs::path& dir, int64_t step) { return dir / "checkpoint" / ("step-" + std::to_string(step)); }

void expect_bitwise(const std::map<int64_t, std::pair<double, double>>& resumed,
                    const std::map<int64_t, std::pair<double, double>>& reference, int64_t from, int64_t to) {
  for (int64_t s = from; s <= to; ++s) {
    ASSERT_TRUE(resumed.count(s) && reference.count(s)) << "step " << s;
    EXPECT_EQ(resumed.at(s).first, reference.at(s).first) << "loss at step " << s;
    EXPECT_EQ(resumed.at(s).second, reference.at(s).second) << "grad_norm at step " << s;
  }
}

// Sets environment variables for the children of one test, unsetting them at the end.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) : vars_(std::move(vars)) {
    for (const auto& [k, v] : vars_) setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : vars_) unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

// Steps 1-20 in one go against 1-10, then a new process resuming 11-20: the losses and grad norms
// must be equal bit for bit, since the checkpoint holds every input of the computation.
void expect_resume_bitwise(const std::string& dtype) {
  testing::TempDir dir;
  auto full = run_train(dir.path(), {"--training.mixed_precision_param", dtype});
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto reference = metrics(dir.path());
  fs::remove_all(step_dir(dir.path(), 20));  // as if the first run had stopped after step 10
  auto resumed = run_train(dir.path(), {"--training.mixed_precision_param", dtype});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from checkpoint"), std::string::npos) << resumed.output;
  EXPECT_EQ(testing::first_logged_step(resumed.output), 11);
  // Rows 1-10 are the first run's, kept in metrics.jsonl; 11-20 the resumed run's.
  expect_bitwise(metrics(dir.path()), reference, 1, 20);
}

TEST(CliCheckpoint, ResumeIsBitwiseFp32) { expect_resume_bitwise("float32"); }
TEST(CliCheckpoint, ResumeIsBitwiseBf16) { expect_resume_bitwise("bfloat16"); }

// A checkpoint saved under one layout resumes under another. The reference is an uninterrupted
// run under the loading layout; DDP and one process differ only in summation order (see
// CliDdp.TwoRanksMatchOneProcessWithTheSameGlobalBatch: <= 3e-7 relative over 30 steps), so the
// same 1e-4 relative tolerance applies, while a wrong sample order or lost optimizer state moves
// the loss by percents.
void expect_reshard_resume(const Args& save_layout, const Args& load_layout) {
  auto run = [](const fs::path& dir, const Args& layout) {
    return layout.empty() ? run_train(dir, {}) : train_ddp(dir, layout);
  };
  testing::TempDir saved, reference;
  auto a = run(saved.path(), save_layout);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  fs::remove_all(step_dir(saved.path(), 20));
  auto b = run(saved.path(), load_layout);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("resumed from checkpoint"), std::string::npos) << b.output;
  auto r = run(reference.path(), load_layout);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto resumed = metrics(saved.path()), expected = metrics(reference.path());
  ASSERT_EQ(testing::first_logged_step(b.output), 11);
  for (int64_t s = 11; s <= 20; ++s) {
    EXPECT_NEAR(resumed[s].first, expected[s].first, 1e-4 * expected[s].first) << "step " << s;
  }
}

// The launcher-level flags are empty for one process; kDdp's degrees are applied by train_ddp.
// FSDP layouts are one more line each once FSDP lands, e.g. expect_reshard_resume({}, kFsdp2).
TEST(CliCheckpoint, OneProcessResumesAsDdp) { expect_reshard_resume({}, {"--parallelism.bucket_cap_mb", "25"}); }
TEST(CliCheckpoint, DdpResumesAsOneProcess) { expect_reshard_resume({"--parallelism.bucket_cap_mb", "25"}, {}); }

// Rank `rank` is SIGKILLed after step 13 of round 0; the launcher restarts both ranks, which
// resume from step-10 and finish. Steps 11-20 of the restarted round equal an uninterrupted run's
// bitwise, and metrics.jsonl holds every step once (rank 0 writes it: killing rank 0 must not
// lose the rows up to the checkpoint, which are on disk before the checkpoint commits).
void expect_kill_and_restart_matches_an_uninterrupted_run(const std::string& rank) {
  testing::TempDir reference, faulty;
  auto r = train_ddp(reference.path(), {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  testing::RunResult f;
  {
    ScopedEnv env({{"CTITAN_FAULT_KILL_AT_STEP", "13"}, {"CTITAN_FAULT_RANK", rank}});
    f = train_ddp(faulty.path(), {}, {"--max-restarts", "1"});
  }
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("raises SIGKILL after step 13"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("resumed from checkpoint"), std::string::npos) << f.output;
  expect_bitwise(metrics(faulty.path()), metrics(reference.path()), 11, 20);
  // metrics.jsonl keeps round 0's steps 1-10 and holds each step once: the rows of steps 11-13
  // that round 0 logged before the kill were replaced by the restarted round's.
  expect_bitwise(metrics(faulty.path()), metrics(reference.path()), 1, 20);
  std::map<int64_t, int> rows_per_step;
  for (const auto& row : testing::read_jsonl((faulty.path() / "metrics.jsonl").string())) {
    if (row.contains("loss")) ++rows_per_step[row["step"].get<int64_t>()];
  }
  EXPECT_EQ(rows_per_step.size(), 20u);
  for (const auto& [step, n] : rows_per_step) EXPECT_EQ(n, 1) << "rows for step " << step;
}

TEST(CliCheckpoint, KillAndRestartThroughTheLauncherMatchesAnUninterruptedRun) {
  expect_kill_and_restart_matches_an_uninterrupted_run("1");
}

TEST(CliCheckpoint, KillOfRankZeroKeepsEveryMetricsRow) { expect_kill_and_restart_matches_an_uninterrupted_run("0"); }

// SIGTERM on rank 1 only, after step 7: both ranks agree to stop after step 7, save it, exit 0.
// Resuming from that emergency checkpoint finishes with the uninterrupted run's losses.
TEST(CliCheckpoint, SigtermSavesAnEmergencyCheckpointAndResumes) {
  testing::TempDir reference, stopped;
  auto r = train_ddp(reference.path(), {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  testing::RunResult s;
  {
    ScopedEnv env({{"CTITAN_FAULT_SIGTERM_AT_STEP", "7"}, {"CTITAN_FAULT_RANK", "1"}});
    s = train_ddp(stopped.path(), {});
  }
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("emergency checkpoint at step 7"), std::string::npos) << s.output;
  EXPECT_EQ(checkpoint::list_step_dirs(stopped.path() / "checkpoint").complete, std::vector<int64_t>{7});
  EXPECT_EQ(metrics(stopped.path()).rbegin()->first, 7);
  auto resumed = train_ddp(stopped.path(), {});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_bitwise(metrics(stopped.path()), metrics(reference.path()), 8, 20);
}

// SIGTERM while the job sets up (here on rank 1, once the checkpoint is loaded): both ranks agree
// before step 1 and stop, exit 0, with nothing trained and nothing saved (the state is the
// checkpoint's). The next run resumes from that checkpoint and matches the uninterrupted run.
TEST(CliCheckpoint, SigtermDuringSetUpStopsBeforeStepOne) {
  testing::TempDir reference, stopped;
  ASSERT_EQ(train_ddp(reference.path(), {}).exit_code, 0);
  {
    // A checkpoint at step 10 of the same 20-step job (its LR schedule): the emergency save.
    ScopedEnv env({{"CTITAN_FAULT_SIGTERM_AT_STEP", "10"}, {"CTITAN_FAULT_RANK", "1"}});
    ASSERT_EQ(train_ddp(stopped.path(), {}).exit_code, 0);
  }
  testing::RunResult s;
  {
    ScopedEnv env({{"CTITAN_FAULT_SIGTERM_IN_SETUP", "1"}, {"CTITAN_FAULT_RANK", "1"}});
    s = train_ddp(stopped.path(), {});
  }
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("rank 1 raises SIGTERM during set-up"), std::string::npos) << s.output;
  EXPECT_NE(s.output.find("SIGTERM during set-up: stopping before step 11, with nothing new to save"), std::string::npos)
      << s.output;
  EXPECT_EQ(s.output.find("step:"), std::string::npos) << s.output;
  EXPECT_EQ(metrics(stopped.path()).rbegin()->first, 10);
  auto resumed = train_ddp(stopped.path(), {});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_bitwise(metrics(stopped.path()), metrics(reference.path()), 11, 20);
}

TEST(CliCheckpoint, CorruptCheckpointFallsBackToThePreviousOne) {
  testing::TempDir dir;
  Args every5 = {"--checkpoint.interval", "5", "--training.steps", "15"};
  ASSERT_EQ(run_train(dir.path(), every5).exit_code, 0);
  auto bad = step_dir(dir.path(), 15) / "rank-00000.bin";
  flip_byte(bad, 1000);
  auto r = run_train(dir.path(), every5);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checksum mismatch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(bad.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from checkpoint " + step_dir(dir.path(), 10).string()), std::string::npos) << r.output;
  EXPECT_EQ(testing::first_logged_step(r.output), 11);

  // Nothing usable left: one clear line, exit 1.
  for (int64_t s : {5, 10, 15}) fs::resize_file(step_dir(dir.path(), s) / "rank-00000.bin", 100);
  auto none = run_train(dir.path(), every5);
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_NE(none.output.find("ctitan: checkpoint error: no usable checkpoint in"), std::string::npos) << none.output;
}

// `ctitan train` of the tiny job plus `extra`, its checkpoint folder `folder` a tmpfs mounted with
// `mount_options` in a private mount namespace; `after` runs in the namespace once training ends
// (the tmpfs is gone outside it). Exit status and output; nullopt where mount namespaces are not
// allowed.
std::optional<std::pair<int, std::string>> train_on_tmpfs(const testing::TempDir& dir, const std::string& folder,
                                                          const std::string& mount_options, const Args& extra,
                                                          const std::string& after = "") {
  if (std::system(("unshare -m true 2>/dev/null")) != 0) return std::nullopt;
  std::string command = "mkdir -p " + folder + " && mount -t tmpfs -o " + mount_options + " tmpfs " + folder + " && " +
                        CTITAN_BIN + " train";
  for (const auto& a : concat(testing::tiny_job_args(dir.path()), concat({"--checkpoint.folder", folder}, extra))) {
    command += " '" + a + "'";
  }
  if (!after.empty()) command += " ; code=$? ; " + after + " ; exit $code";
  int status = std::system(("unshare -m sh -c \"" + command + "\" > " + dir.file("out.txt") + " 2>&1").c_str());
  return std::pair{WEXITSTATUS(status), testing::read_file(dir.file("out.txt"))};
}

// A real full disk: the checkpoint folder on a 2.5 MB tmpfs in a private mount namespace. The
// tiny job's full checkpoint is ~1.7 MB, so step 5 fits and step 10 does not; the model-only
// save at step 12 (~0.55 MB) fits again. Skipped where mount namespaces are not allowed.
TEST(CliCheckpointMounts, DiskFullLeavesThePreviousCheckpointIntact) {
  testing::TempDir dir;
  auto run = train_on_tmpfs(dir, dir.file("full"), "size=2500k",
                            {"--checkpoint.enable", "true", "--checkpoint.interval", "5", "--training.steps", "12"},
                            "cp -r " + dir.file("full") + " " + dir.file("copy"));
  if (!run) GTEST_SKIP() << "no mount namespaces here";
  const auto& [code, output] = *run;
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("No space left on device"), std::string::npos) << output;
  EXPECT_NE(output.find("older checkpoints are intact"), std::string::npos) << output;
  auto left = checkpoint::list_step_dirs(dir.file("copy"));
  EXPECT_EQ(left.complete, (std::vector<int64_t>{5, 12}));
  EXPECT_TRUE(left.incomplete.empty());  // the failed step-10 was cleaned up
  checkpoint::CheckpointReader(fs::path(dir.file("copy")) / "step-5").verify_all();
}

// A checkpoint folder that cannot be written is found at start-up, not at the first save hours
// later: a read-only mount (root writes through permission bits, so a mount it is).
TEST(CliCheckpointMounts, AReadOnlyFolderIsRefusedAtStartUp) {
  testing::TempDir dir;
  auto run = train_on_tmpfs(dir, dir.file("ro"), "ro,size=1m",
                            {"--checkpoint.enable", "true", "--checkpoint.interval", "50", "--training.steps", "60"});
  if (!run) GTEST_SKIP() << "no mount namespaces here";
  const auto& [code, output] = *run;
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("checkpoint.folder '" + dir.file("ro") + "' is not writable: Read-only file system"),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("step:"), std::string::npos) << "trained before refusing:\n" << output;
}

// The background writer saves the same tensors as the synchronous one, byte for byte, and the
// training it overlaps is unchanged. keep_latest_k 2 leaves the newest two.
TEST(CliCheckpoint, AsyncSaveEqualsSyncSave) {
  testing::TempDir sync_dir, async_dir;
  Args common = {"--checkpoint.interval", "4", "--training.steps", "12", "--checkpoint.keep_latest_k", "2"};
  ASSERT_EQ(run_train(sync_dir.path(), common).exit_code, 0);
  auto a = run_train(async_dir.path(), concat(common, {"--checkpoint.async_mode", "async"}));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  expect_bitwise(metrics(async_dir.path()), metrics(sync_dir.path()), 1, 12);
  EXPECT_EQ(checkpoint::list_step_dirs(async_dir.path() / "checkpoint").complete, (std::vector<int64_t>{8, 12}));
  for (int64_t s : {8, 12}) {
    checkpoint::CheckpointReader x(step_dir(sync_dir.path(), s)), y(step_dir(async_dir.path(), s));
    ASSERT_EQ(x.metadata().entries.size(), y.metadata().entries.size());
    for (const auto& e : x.metadata().entries) {
      EXPECT_TRUE(torch::equal(x.read_whole(e.part, e.key, e.rank), y.read_whole(e.part, e.key, e.rank)))
          << e.part << "/" << e.key << " at step " << s;
    }
  }
}

// A seed checkpoint (seed 7) loaded by jobs with another seed (8): one process reproduces a
// plain seed-7 run bitwise, and DDP from the same seed matches it (DDP tolerance, see above).
TEST(CliCheckpoint, SeedCheckpointGivesTheSameLossesInEveryLayout) {
  testing::TempDir seed, plain, single, ddp;
  auto s = run_train(seed.path(), {"--checkpoint.create_seed_checkpoint", "true"});
  ASSERT_EQ(s.exit_code, 0) << s.output;
  auto seed_dir = step_dir(seed.path(), 0);
  ASSERT_TRUE(checkpoint::CheckpointReader(seed_dir).metadata().model_only);
  Args from_seed = {"--debug.seed", "8", "--checkpoint.initial_load_path", seed_dir.string()};
  ASSERT_EQ(run_train(plain.path(), {}).exit_code, 0);
  auto a = run_train(single.path(), from_seed);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = train_ddp(ddp.path(), from_seed);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto reference = metrics(plain.path()), from_single = metrics(single.path()), from_ddp = metrics(ddp.path());
  expect_bitwise(from_single, reference, 1, 20);
  for (int64_t st = 1; st <= 20; ++st) EXPECT_NEAR(from_ddp[st].first, reference[st].first, 1e-4 * reference[st].first);
}

// A dataset whose token 40 (outside the vocabulary of 32) sits inside the 7th step's batch: the
// step throws, and the emergency checkpoint holds the state after step 6, with the dataloader
// back at the start of step 7, equal bitwise to an interval checkpoint of a clean run at step 6
// (except for the one bad token inside the dataloader's read-ahead buffer).
TEST(CliCheckpoint, ExceptionInAStepSavesAnEmergencyCheckpoint) {
  testing::TempDir bad, clean;
  testing::tiny_job_args(clean.path());  // writes the clean cyclic data
  {
    data::TokenFileWriter writer(bad.file("bad.bin"), 64);
    std::vector<int32_t> tokens(20000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i % 16);
    tokens[6 * 4 * 33 + 40] = 40;  // 6 steps x 4 windows x 33 tokens, then into step 7
    writer.append(tokens);
    writer.finish();
  }
  // The same step count for both: the lr schedule depends on it.
  auto r = run_train(bad.path(), {"--training.dataset_path", bad.file("bad.bin"), "--checkpoint.interval", "100",
                              "--training.steps", "8"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("saving an emergency checkpoint at step 6"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("token id 40"), std::string::npos) << r.output;
  auto c = run_train(clean.path(), {"--checkpoint.interval", "6", "--training.steps", "8"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  checkpoint::CheckpointReader x(step_dir(bad.path(), 6)), y(step_dir(clean.path(), 6));
  for (const auto& e : y.metadata().entries) {
    auto a = x.read_whole(e.part, e.key, e.rank), b = y.read_whole(e.part, e.key, e.rank);
    if (e.part == "dataloader" && e.key == "buffer") {
      EXPECT_EQ(a.numel(), b.numel());
      EXPECT_LE((a != b).sum().item<int64_t>(), 1);
      continue;
    }
    EXPECT_TRUE(torch::equal(a, b)) << e.part << "/" << e.key;
  }
}

TEST(CliCheckpoint, InspectDescribesAndVerifies) {
  testing::TempDir dir;
  ASSERT_EQ(run_train(dir.path(), {"--training.steps", "10"}).exit_code, 0);
  auto ok = testing::run_ctitan({"checkpoint", "inspect", "--verify", (dir.path() / "checkpoint").string()});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("step 10"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("part model"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("verified"), std::string::npos) << ok.output;
  auto file = step_dir(dir.path(), 10) / "rank-00000.bin";
  flip_byte(file, 5000);
  auto bad = testing::run_ctitan({"checkpoint", "inspect", "--verify", step_dir(dir.path(), 10).string()});
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find(file.string()), std::string::npos) << bad.output;
  auto none = testing::run_ctitan({"checkpoint", "inspect", dir.file("nothing")});
  EXPECT_EQ(none.exit_code, 1) << none.output;
}

}  // namespace
}  // namespace ctitan
