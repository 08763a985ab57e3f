#include "ctitan/checkpoint/retention.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ctitan/checkpoint/metadata.h"
#include "ctitan/common/atomic_file.h"
#include "ctitan/common/error.h"

namespace ctitan::checkpoint {

StepDirs list_step_dirs(const std::filesystem::path& folder) {
  StepDirs dirs;
  std::error_code ec;
  for (const auto& item : std::filesystem::directory_iterator(folder, ec)) {
    auto step = parse_step_dir_name(item.path().filename().string());
    if (!step || !item.is_directory()) continue;
    (std::filesystem::exists(item.path() / kMetadataFile) ? dirs.complete : dirs.incomplete).push_back(*step);
  }
  std::sort(dirs.complete.begin(), dirs.complete.end());
  std::sort(dirs.incomplete.begin(), dirs.incomplete.end());
  return dirs;
}

std::vector<std::filesystem::path> purge_old_checkpoints(const std::filesystem::path& folder, int64_t keep,
                                                         int64_t protect) {
  auto dirs = list_step_dirs(folder);
  std::vector<std::filesystem::path> removed;
  if (dirs.complete.empty()) return removed;
  std::vector<int64_t> doomed;
  const auto n = int64_t(dirs.complete.size());
  if (keep > 0 && n > keep) doomed.assign(dirs.complete.begin(), dirs.complete.end() - keep);
  for (auto step : dirs.incomplete) {
    if (step < dirs.complete.back()) doomed.push_back(step);
  }
  for (auto step : doomed) {
    if (step == protect) continue;
    auto path = folder / step_dir_name(step);
    // Metadata first: a purge interrupted half-way leaves an incomplete dir, never a damaged checkpoint.
    std::error_code ec;
    std::filesystem::remove(path / kMetadataFile, ec);
    std::filesystem::remove_all(path, ec);
    if (!ec) removed.push_back(path);
  }
  return removed;
}

BestCheckpoint read_best(const std::filesystem::path& folder) {
  const auto path = folder / kBestFile;
  if (!std::filesystem::exists(path)) return {};
  try {
    auto j = nlohmann::json::parse(std::ifstream(path));
    return {j.at("step").get<int64_t>(), j.at("validation_loss").get<double>()};
  } catch (const std::exception& e) {
    throw InputError(fmt::format("checkpoint error: {}: {}", path.string(), e.what()));
  }
}

void write_best(const std::filesystem::path& folder, const BestCheckpoint& best) {
  write_file_atomically(folder / kBestFile,
                        nlohmann::json{{"step", best.step}, {"validation_loss", best.validation_loss}}.dump(2) + "\n");
}

}  // namespace ctitan::checkpoint
