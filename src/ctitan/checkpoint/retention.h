#pragma once
// The step directories of a checkpoint folder, and keep_latest_k's purge.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace ctitan::checkpoint {

struct StepDirs {
  std::vector<int64_t> complete;    // with metadata.json, ascending
  std::vector<int64_t> incomplete;  // without: a save that never finished, ascending
};

StepDirs list_step_dirs(const std::filesystem::path& folder);

// Keeps the newest `keep` complete checkpoints (keep <= 0 keeps all) and removes the older ones,
// plus incomplete directories older than the newest complete checkpoint (a save in progress is
// always newer). The newest complete checkpoint is never removed. Returns what was removed.
std::vector<std::filesystem::path> purge_old_checkpoints(const std::filesystem::path& folder, int64_t keep);

}  // namespace ctitan::checkpoint
