#include "ctitan/checkpoint/manager.h"

#include <torch/cuda.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>

#include "ctitan/checkpoint/fault_signals.h"
#include "ctitan/checkpoint/metadata.h"
#include "ctitan/checkpoint/retention.h"
#include "ctitan/checkpoint/save_plan.h"
#include "ctitan/checkpoint/sharded_save.h"
#include "ctitan/distributed/comm_error.h"
#include "ctitan/common/error.h"
#include "ctitan/common/output_target.h"
#include "ctitan/common/path_text.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/distributed/communicator.h"

namespace ctitan::checkpoint {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// False for unreadable metadata too: loading it then reports why.
bool is_model_only(const std::filesystem::path& step_dir) {
  try {
    return read_metadata(step_dir).model_only;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

CheckpointManager::CheckpointManager(const config::JobConfig& config, std::shared_ptr<Coordinator> coordinator,
                                     std::shared_ptr<distributed::Communicator> world, RankPlace place,
                                     Stateful& job)
    : config_(config), config_toml_(config::to_toml(config)), coordinator_(std::move(coordinator)),
      world_(std::move(world)), place_(place), job_(&job),
      folder_(std::filesystem::path(config.job.dump_folder) / config.checkpoint.folder),
      async_(config.checkpoint.async_mode == config::AsyncMode::kAsync) {
  if (config_.checkpoint.create_seed_checkpoint && place_.world_size != 1) {
    throw ConfigError(fmt::format("checkpoint.create_seed_checkpoint needs a single process (got {} ranks)",
                                  place_.world_size));
  }
  // The first save may come hours in: a folder it cannot write is an error now, not then.
  if (config_.checkpoint.enable || config_.checkpoint.create_seed_checkpoint) {
    check_writable_folder("checkpoint.folder", folder_);
  }
  if (config_.checkpoint.enable) {
    clear_sigterm();
    install_sigterm_handler();
  }
}

CheckpointManager::~CheckpointManager() {
  worker_.wait();
  if (config_.checkpoint.enable) uninstall_sigterm_handler();
}

std::string CheckpointManager::try_load(const std::filesystem::path& step_dir, PartStates& state,
                                        const PartLayouts& layouts, bool model_only, int64_t expected_step) {
  std::string model_diff;  // how the saving job's [model] differs from this one's, for errors
  try {
    CheckpointReader reader(step_dir);
    const auto& m = reader.metadata();
    if (expected_step >= 0 && m.step != expected_step) {
      return fmt::format("checkpoint error: {} says it is step {}, not {}", step_dir.string(), m.step, expected_step);
    }
    if (m.config_hash != config_hash(config_toml_)) {
      if (place_.rank == 0) {
        spdlog::info("checkpoint {} was saved with another config (hash {}, now {})", step_dir.string(),
                     m.config_hash, config_hash(config_toml_));
      }
      model_diff = saved_model_differences(m.config_toml);
    }
    // Loading reads the tensors this job's model has; one the checkpoint has beyond them (more
    // layers, another family's parameters) would be dropped silently, and the next save would
    // hold the smaller model.
    for (const auto& key : model_keys_.empty() ? std::vector<std::string>{} : reader.keys("model")) {
      if (!model_keys_.count(key)) {
        return fmt::format("checkpoint error: {} holds model/{}, which this job's model does not have{}",
                           step_dir.string(), key, model_diff);
      }
    }
    std::set<std::string> parts;
    for (const auto& [part, dict] : state) {
      if (part == "model" || !(model_only || m.model_only)) parts.insert(part);
    }
    load_into(reader, state, layouts, place_, parts);
    return "";
  } catch (const std::exception& e) {
    return e.what() + model_diff;
  }
}

void CheckpointManager::refuse_another_tokenizer(const std::filesystem::path& step_dir) const {
  if (tokenizer_fingerprint_.empty()) return;
  Metadata m;
  try {
    m = read_metadata(step_dir);
  } catch (const std::exception&) {
    return;  // unreadable: loading it says why
  }
  if (m.tokenizer_fingerprint.empty() || m.tokenizer_fingerprint == tokenizer_fingerprint_) return;
  throw InputError(fmt::format("checkpoint error: {} was saved by a job with another tokenizer (vocabulary fingerprint "
                               "{}; this job's model.tokenizer_path '{}' has {}): its token ids would mean other text; "
                               "use the tokenizer it was trained with{}",
                               step_dir.string(), m.tokenizer_fingerprint, config_.model.tokenizer_path,
                               tokenizer_fingerprint_, saved_model_differences(m.config_toml)));
}

std::string CheckpointManager::saved_model_differences(const std::string& saved_toml) const {
  config::JobConfig saved;
  try {
    saved = config::parse_job_config(saved_toml, "checkpoint metadata");
  } catch (const std::exception&) {
    return "";  // an older config this build cannot read: the error says enough without it
  }
  auto differences = config::section_differences(saved, config_, "model");
  if (differences.empty()) return "";
  return "; the checkpoint's job had " + fmt::format("{}", fmt::join(differences, ", "));
}

bool CheckpointManager::load() {
  auto state = job_->load_targets();
  if (!load_first_usable(state, job_->shard_layouts())) return false;
  job_->load_state_dicts(state);
  return true;
}

bool CheckpointManager::load_first_usable(PartStates& state, const PartLayouts& layouts) {
  const auto& c = config_.checkpoint;
  if (c.enable) {
    // Rank 0's listing is the one every rank walks, so all try the same checkpoints in order.
    std::string listing;
    for (auto step : list_step_dirs(folder_).complete) listing += std::to_string(step) + " ";
    std::vector<int64_t> candidates;
    std::istringstream words(coordinator_->all_gather(listing)[0]);
    for (int64_t step; words >> step;) candidates.insert(candidates.begin(), step);  // newest first
    if (c.load_step >= 0) {
      if (std::find(candidates.begin(), candidates.end(), c.load_step) == candidates.end()) {
        throw InputError(fmt::format("checkpoint error: checkpoint.load_step {}: {} is not a complete checkpoint",
                                     c.load_step, (folder_ / step_dir_name(c.load_step)).string()));
      }
      candidates = {c.load_step};
    }
    std::string first_error;
    for (auto step : candidates) {
      auto dir = folder_ / step_dir_name(step);
      if (step > 0 && c.load_step < 0 && is_model_only(dir)) {
        if (place_.rank == 0) spdlog::info("skipping {}: a model-only export cannot resume training", dir.string());
        continue;
      }
      // A job error, not a damaged checkpoint: refused, never passed over for an older one.
      refuse_another_tokenizer(dir);
      auto error = join_rank_errors(coordinator_->all_gather(try_load(dir, state, layouts, false, step)));
      if (error.empty()) {
        spdlog::info("resumed from checkpoint {}", dir.string());
        if (c.keep_best) resume_best(step);
        return true;
      }
      if (first_error.empty()) first_error = error;
      spdlog::warn("checkpoint {} is unusable, trying the previous one: {}", dir.string(), error);
    }
    if (!first_error.empty()) {
      throw InputError(fmt::format("checkpoint error: no usable checkpoint in {} (newest: {})", folder_.string(),
                                   first_error));
    }
  }
  if (c.initial_load_path.empty()) return false;
  refuse_another_tokenizer(c.initial_load_path);
  auto error = join_rank_errors(
      coordinator_->all_gather(try_load(c.initial_load_path, state, layouts, c.initial_load_model_only)));
  if (!error.empty()) {
    throw InputError(fmt::format("checkpoint.initial_load_path {}{}: {}", c.initial_load_path,
                                 relative_path_note(c.initial_load_path), error));
  }
  spdlog::info("loaded initial checkpoint {}{}", c.initial_load_path, c.initial_load_model_only ? " (model only)" : "");
  return true;
}

std::string CheckpointManager::save(int64_t step, PartStates state, const PartLayouts& layouts, bool model_only) {
  auto start = std::chrono::steady_clock::now();
  try {
    if (before_save_) before_save_();
  } catch (const std::exception& e) {
    return e.what();  // a save reports failures as its one-line error, never by throwing
  }
  worker_.wait();  // a save first waits for the previous one
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    async_error_.clear();  // finish() reports the newest save's failure only
  }
  if (model_only) {
    StateDict model;
    for (const auto& [key, t] : state.at("model")) model[key] = t.detach().to(config_.checkpoint.export_dtype);
    state = {{"model", model}};
  }
  SaveRequest request{folder_ / step_dir_name(step), step, model_only, config_toml_, place_.dp_rank, place_.dp_degree,
                      tokenizer_fingerprint_};
  std::vector<LocalSlice> to_write;
  inject_fault_in_save(step, place_.rank);
  try {
    to_write = plan_save(*coordinator_, request, local_slices(state, layouts, place_.rank));
  } catch (const distributed::CommError&) {
    throw;  // a rank stopped answering: the job cannot go on (a disk error, by contrast, can)
  } catch (const std::exception& e) {
    last_blocked_seconds_ = seconds_since(start);
    return e.what();
  }
  const int64_t keep = config_.checkpoint.keep_latest_k;
  const bool purger = place_.rank == 0;
  // A new best becomes the best once its checkpoint is committed (then best.json is written and
  // the step is protected from purges); until then, and if the save fails, the old best stays.
  const bool new_best = pending_best_ && pending_best_->step == step;
  const BestCheckpoint best = new_best ? *pending_best_ : committed_best();
  pending_best_.reset();
  if (new_best) best_handed_loss_ = best.validation_loss;
  auto commit_best = [this, best, new_best] {
    if (new_best) set_committed_best(best);
  };
  auto purge = [folder = folder_, keep, purger, best, new_best] {
    if (!purger) return;
    if (new_best) write_best(folder, best);
    for (const auto& path : purge_old_checkpoints(folder, keep, best.step)) {
      spdlog::info("removed old checkpoint {}", path.string());
    }
  };
  if (async_) {
    // Snapshot at the step boundary: the background thread writes copies while training goes on.
    // The copies go into staging buffers kept from the previous save (free: we waited for it),
    // so a save costs a memcpy, not fresh allocations and their page faults. The buffers are in
    // host memory whatever the state's device (a GPU copy would double the model state in device
    // memory), pinned for device state so the copies run as DMA without blocking per tensor.
    bool from_device = false;
    for (auto& s : to_write) {
      auto& buffer = staging_[slice_identity(s)];
      const bool pinned = s.tensor.is_cuda();
      if (!buffer.defined() || buffer.sizes() != s.tensor.sizes() || buffer.scalar_type() != s.tensor.scalar_type() ||
          buffer.is_pinned() != pinned) {
        buffer = torch::empty(s.tensor.sizes(), torch::TensorOptions(s.tensor.scalar_type()).pinned_memory(pinned));
      }
      buffer.copy_(s.tensor.detach(), /*non_blocking=*/pinned);
      from_device = from_device || pinned;
      s.tensor = buffer;
    }
    // The writer thread reads the buffers: every device-to-host copy must have landed.
    if (from_device) torch::cuda::synchronize();
    worker_.submit([this, request, to_write = std::move(to_write), purge, commit_best] {
      try {
        execute_save(*coordinator_, request, to_write);
        commit_best();
        spdlog::info("saved checkpoint {} (async)", request.step_dir.string());
        purge();
      } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        std::lock_guard<std::mutex> lock(error_mutex_);
        async_error_ = e.what();
      }
    });
    last_blocked_seconds_ = seconds_since(start);
    return "";
  }
  try {
    execute_save(*coordinator_, request, to_write);
  } catch (const distributed::CommError&) {
    throw;
  } catch (const std::exception& e) {
    last_blocked_seconds_ = seconds_since(start);
    return e.what();
  }
  commit_best();
  last_blocked_seconds_ = seconds_since(start);
  spdlog::info("saved checkpoint {} in {:.3f} s", request.step_dir.string(), last_blocked_seconds_);
  worker_.submit(purge);  // retention runs in the background
  return "";
}

void CheckpointManager::save_seed() {
  auto error = save(0, job_->state_dicts(), {}, true);
  if (!error.empty()) throw IoError(error);
  worker_.wait();
}

void CheckpointManager::step_starting(int64_t done_steps) {
  if (!config_.checkpoint.enable) return;
  boundary_state_.clear();
  boundary_step_ = done_steps;
  for (const auto& [part, dict] : job_->state_dicts()) {
    if (is_per_rank_part(part)) boundary_state_[part] = dict;  // fresh copies from state_dicts()
  }
}

bool CheckpointManager::any_rank_stopping() {
  if (!world_) return sigterm_received();
  // One tiny collective per step, so that every rank stops after the same step.
  auto flag = torch::tensor(int64_t(sigterm_received() ? 1 : 0), torch::kLong);
  world_->all_reduce(flag, distributed::ReduceOp::kMax);
  return flag.item<int64_t>() != 0;
}

bool CheckpointManager::save_due(int64_t step, bool last) const {
  const auto& c = config_.checkpoint;
  return last || step % c.interval == 0 || (step == 1 && c.enable_first_step_checkpoint) ||
         (pending_best_ && pending_best_->step == step);
}

BestCheckpoint CheckpointManager::committed_best() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  return best_;
}

void CheckpointManager::set_committed_best(const BestCheckpoint& best) {
  std::lock_guard<std::mutex> lock(error_mutex_);
  best_ = best;
}

void CheckpointManager::resume_best(int64_t resumed_step) {
  // Rank 0's best.json, as every rank sees it (the folder may not be shared between nodes), so
  // that all ranks agree on which validation loss makes a save due.
  auto mine = place_.rank == 0 ? read_best(folder_) : BestCheckpoint{};
  std::istringstream agreed(coordinator_->all_gather(fmt::format("{} {:.17g}", mine.step, mine.validation_loss))[0]);
  BestCheckpoint best;
  agreed >> best.step >> best.validation_loss;
  if (best.step > resumed_step) {
    // Recorded by a run that went past the step resumed from and was abandoned: not this run's.
    if (place_.rank == 0) spdlog::info("ignoring {}: its step {} is after the resumed step {}", kBestFile, best.step, resumed_step);
    best = BestCheckpoint{};
  }
  set_committed_best(best);
  best_handed_loss_ = best.validation_loss;
}

void CheckpointManager::record_validation_loss(int64_t step, double loss) {
  if (!config_.checkpoint.enable || !config_.checkpoint.keep_best) return;
  // Against every loss already handed to a save (an async one may not have committed yet).
  const double best_so_far = std::min(pending_best_ ? pending_best_->validation_loss : INFINITY, best_handed_loss_);
  if (loss < best_so_far) pending_best_ = BestCheckpoint{step, loss};
}

bool CheckpointManager::stop_before_training() {
  if (!config_.checkpoint.enable) return false;  // no handler: SIGTERM ends the process at once
  inject_fault_in_setup(place_.rank);
  return any_rank_stopping();
}

bool CheckpointManager::after_step(int64_t step, bool last) {
  if (!config_.checkpoint.enable) return false;
  inject_faults_after_step(step, place_.rank);
  const bool stop = any_rank_stopping();
  if (stop && place_.rank == 0) spdlog::warn("SIGTERM: saving an emergency checkpoint at step {}, then stopping", step);
  if (!stop && !save_due(step, last)) return false;
  const bool model_only = last && !stop && config_.checkpoint.last_save_model_only;
  auto error = save(step, job_->state_dicts(), job_->shard_layouts(), model_only);
  if (!error.empty()) {
    // The previous checkpoint is intact; training goes on, except after the last step.
    save_failed_ = last || stop;
    if (save_failed_) throw IoError(error);
    spdlog::error("{}", error);
  }
  if (stop) finish();
  return stop;
}

void CheckpointManager::on_exception(int64_t step, bool optimizer_started, const std::string& what) {
  if (!config_.checkpoint.enable) return;
  std::string why_not;
  if (place_.world_size > 1) {
    why_not = "the other ranks cannot join a collective save from an exception on one rank";
  } else if (optimizer_started) {
    why_not = fmt::format("the exception came during the optimizer update of step {}, so the parameters are "
                          "partly updated", step + 1);
  } else if (save_failed_) {
    why_not = "the failure was the checkpoint save itself";
  } else if (boundary_step_ != step && boundary_step_ + 1 != step) {
    why_not = "no step had started";
  }
  if (!why_not.empty()) {
    spdlog::error("no emergency checkpoint: {}; resume from the last saved checkpoint in {}", why_not, folder_.string());
    return;
  }
  // Inside a step, parameters and optimizer are still those after `step`; the per-rank parts go
  // back to the step start, so the batch that failed is read again on resume. After a step
  // completed (logging, validation), the live state is that of `step` as it is.
  auto state = job_->state_dicts();
  if (boundary_step_ == step) {
    for (auto& [part, dict] : boundary_state_) state[part] = dict;
  }
  spdlog::error("step {} failed ({}): saving an emergency checkpoint at step {}", step + 1, what, step);
  auto error = save(step, std::move(state), job_->shard_layouts(), false);
  worker_.wait();
  if (!error.empty()) spdlog::error("emergency checkpoint failed: {}", error);
}

void CheckpointManager::finish() {
  worker_.wait();
  std::lock_guard<std::mutex> lock(error_mutex_);
  if (!async_error_.empty()) {
    auto error = async_error_;
    async_error_.clear();
    throw IoError(error);
  }
}

}  // namespace ctitan::checkpoint
