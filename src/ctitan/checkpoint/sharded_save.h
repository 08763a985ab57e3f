#pragma once
// One collective save in two phases. plan_save runs on the training thread at the step boundary
// (it only exchanges slice lists); execute_save writes the bytes and commits, on the training
// thread (sync) or a background thread (async). Rank 0 writes metadata.json last, atomically,
// and only if every rank's file was written: a failed save leaves no checkpoint behind and
// every older checkpoint untouched.
#include <filesystem>
#include <string>
#include <vector>

#include "ctitan/checkpoint/coordinator.h"
#include "ctitan/checkpoint/save_plan.h"

namespace ctitan::checkpoint {

struct SaveRequest {
  std::filesystem::path step_dir;
  int64_t step = 0;
  bool model_only = false;
  std::string config_toml;
  int dp_rank = 0, dp_degree = 1;
  std::string tokenizer_fingerprint;  // Metadata::tokenizer_fingerprint
};

// Removes a stale metadata.json at step_dir (rank 0) before anyone writes there, then returns
// the slices this rank must write.
std::vector<LocalSlice> plan_save(Coordinator& coordinator, const SaveRequest& request,
                                  std::vector<LocalSlice> mine);

// Throws InputError on every rank when any rank failed, naming the rank, file and OS error.
void execute_save(Coordinator& coordinator, const SaveRequest& request, const std::vector<LocalSlice>& to_write);

// plan_save + execute_save.
void save(Coordinator& coordinator, const SaveRequest& request, std::vector<LocalSlice> mine);

}  // namespace ctitan::checkpoint
