#pragma once
// CheckpointManager: the [checkpoint] policy around the sharded save and load of one job's
// Stateful parts, given once. The trainer calls load() once at startup, step_starting() and
// after_step() around every step, and on_exception() when a step throws. See
// docs/CHECKPOINT_FORMAT.md.
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "ctitan/checkpoint/async_saver.h"
#include "ctitan/checkpoint/coordinator.h"
#include "ctitan/checkpoint/retention.h"
#include "ctitan/checkpoint/state_loader.h"
#include "ctitan/checkpoint/stateful.h"
#include "ctitan/common/state_dict.h"
#include "ctitan/config/job_config.h"

namespace ctitan::distributed {
class Communicator;
}

namespace ctitan::checkpoint {

class CheckpointManager {
 public:
  // `world` (null where the caller has no group, as the ps servers) decides collectively, once per step, whether any rank got
  // SIGTERM. `job` is what every save and load reads and fills; it outlives the manager.
  CheckpointManager(const config::JobConfig& config, std::shared_ptr<Coordinator> coordinator,
                    std::shared_ptr<distributed::Communicator> world, RankPlace place, Stateful& job);
  ~CheckpointManager();

  // Resumes from checkpoint.load_step or the newest valid checkpoint of the folder, falling back
  // past corrupt ones with a warning; else from checkpoint.initial_load_path. Fills the job's
  // load_targets() in place (per-rank parts are replaced), hands them to its load_state_dicts()
  // and returns true, or returns false if there was nothing to load. Throws InputError when
  // checkpoints exist but none is usable.
  bool load();

  // create_seed_checkpoint: writes step-0 with the model only (one process only).
  void save_seed();

  // Before step `done_steps` + 1 fetches its batch: keeps the per-rank parts, so that a step
  // that throws can still be saved as the state of the step boundary before it.
  void step_starting(int64_t done_steps);

  // Once set-up is done, before the first step: injects the set-up test fault and agrees on
  // SIGTERM. True when a rank got it during set-up (loading, building): training must not start,
  // and there is nothing new to save (the state is the loaded checkpoint's, or the initial one).
  bool stop_before_training();

  // After `step` completed: injects test faults, agrees on SIGTERM, saves when due. Returns true
  // when training must stop now (a rank got SIGTERM; the emergency checkpoint is written).
  bool after_step(int64_t step, bool last);

  // An exception escaped training with `step` steps done. Saves an emergency checkpoint at `step`
  // when the state is consistent (one process, parameters not partly updated, not itself a
  // failed save), else logs why not.
  void on_exception(int64_t step, bool optimizer_started, const std::string& what);

  // checkpoint.keep_best: the validation loss measured after `step` (the same on every rank). A new
  // best makes after_step(step) save, and that checkpoint is kept by retention (best.json).
  void record_validation_loss(int64_t step, double loss);

  // Waits for an async save in flight; throws if the last step's save failed.
  void finish();

  // Seconds the training thread was blocked by the last save (waiting for the previous one,
  // planning, snapshotting, and for a sync save, writing).
  double last_blocked_seconds() const { return last_blocked_seconds_; }

  // Runs on the training thread before every save, e.g. to put the metrics logged so far on disk
  // before the checkpoint that covers their steps commits.
  void set_before_save(std::function<void()> hook) { before_save_ = std::move(hook); }
  // Every parameter FQN of the job's whole model (all stages). A checkpoint whose model holds
  // others (say more layers) is refused rather than loaded partly; unset: not checked.
  void expect_model_keys(std::set<std::string> keys) { model_keys_ = std::move(keys); }
  // The job's data::Tokenizer::fingerprint() (empty: the job has no tokenizer). Saves record it;
  // a checkpoint that recorded another is not loaded: its token ids mean other text.
  void expect_tokenizer(std::string fingerprint) { tokenizer_fingerprint_ = std::move(fingerprint); }
  // The timeout of the ranks' plan and result exchanges (comm.train_timeout_seconds after step 1).
  void set_timeout(std::chrono::milliseconds timeout) { coordinator_->set_timeout(timeout); }

  // Saves the job's state as step `step` now (collective). Returns "" or the one-line error.
  std::string save(int64_t step, bool model_only = false) {
    return save(step, job_->state_dicts(), job_->shard_layouts(), model_only);
  }

 private:
  std::string save(int64_t step, PartStates state, const PartLayouts& layouts, bool model_only);
  // The newest usable checkpoint (or initial_load_path) into `state`; false if none to load.
  bool load_first_usable(PartStates& state, const PartLayouts& layouts);
  // "" or the one-line reason `step_dir` cannot be loaded; `expected_step` (>= 0) is the step its
  // folder name says, which its metadata must agree with.
  std::string try_load(const std::filesystem::path& step_dir, PartStates& state, const PartLayouts& layouts,
                       bool model_only, int64_t expected_step = -1);
  // "; the checkpoint's job had model.n_layers = 8 (this job: 6), ..." for the [model] keys
  // whose values differ, or "".
  std::string saved_model_differences(const std::string& saved_toml) const;
  // An InputError when step_dir's metadata records a tokenizer other than this job's.
  void refuse_another_tokenizer(const std::filesystem::path& step_dir) const;
  bool any_rank_stopping();
  bool save_due(int64_t step, bool last) const;
  BestCheckpoint committed_best() const;
  void set_committed_best(const BestCheckpoint& best);
  // keep_best after resuming from `resumed_step`: rank 0's best.json, unless it is newer.
  void resume_best(int64_t resumed_step);

  config::JobConfig config_;
  std::string config_toml_;
  std::set<std::string> model_keys_;
  std::string tokenizer_fingerprint_;
  std::shared_ptr<Coordinator> coordinator_;
  std::shared_ptr<distributed::Communicator> world_;
  RankPlace place_;
  Stateful* job_;
  std::filesystem::path folder_;
  bool async_;
  PartStates boundary_state_;  // per-rank parts at the last step start
  int64_t boundary_step_ = -1;
  bool save_failed_ = false;   // the exception in flight is a failed save
  BestCheckpoint best_;        // keep_best: the committed best (best.json); under error_mutex_
  std::optional<BestCheckpoint> pending_best_;  // a better validation loss, to be saved at its step
  double best_handed_loss_ = INFINITY;          // the lowest validation loss handed to a save
  std::function<void()> before_save_;
  std::map<std::string, torch::Tensor> staging_;  // async snapshot buffers by slice identity
  mutable std::mutex error_mutex_;  // async_error_ and best_, which the background thread sets
  std::string async_error_;    // set by the background thread
  double last_blocked_seconds_ = 0;
  BackgroundWorker worker_;    // last: joined before the members its jobs use are destroyed
};

}  // namespace ctitan::checkpoint
