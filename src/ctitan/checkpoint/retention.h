#pragma once
// The step directories of a checkpoint folder, keep_latest_k's purge, and keep_best's record.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <vector>

namespace ctitan::checkpoint {

struct StepDirs {
  std::vector<int64_t> complete;    // with metadata.json, ascending
  std::vector<int64_t> incomplete;  // without: a save that never finished, ascending
};

StepDirs list_step_dirs(const std::filesystem::path& folder);

// Keeps the newest `keep` complete checkpoints (keep <= 0 keeps all) and removes the older ones,
// plus incomplete directories older than the newest complete checkpoint (a save in progress is
// always newer). The newest complete checkpoint, and step `protect` (keep_best's), are never
// removed. Returns what was removed.
std::vector<std::filesystem::path> purge_old_checkpoints(const std::filesystem::path& folder, int64_t keep,
                                                         int64_t protect = -1);

// best.json of a checkpoint folder (checkpoint.keep_best): the saved step with the lowest
// validation loss so far.
struct BestCheckpoint {
  int64_t step = -1;  // -1: none yet
  double validation_loss = std::numeric_limits<double>::infinity();
};
inline constexpr const char* kBestFile = "best.json";
// {step -1} when the folder has no best.json; an unreadable one is an InputError naming it.
BestCheckpoint read_best(const std::filesystem::path& folder);
void write_best(const std::filesystem::path& folder, const BestCheckpoint& best);  // atomically

}  // namespace ctitan::checkpoint
