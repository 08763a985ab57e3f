#pragma once
// Reads one checkpoint's slices back, resharding on the way: a target slice (any box of a
// tensor: FSDP rows, TP rows or columns, both) is filled from every saved slice that overlaps it, whatever layout saved them. Each
// saved slice is read whole and its checksum verified before any of its bytes are used.
#include <filesystem>
#include <string>
#include <vector>

#include "ctitan/checkpoint/metadata.h"

namespace ctitan::checkpoint {

class CheckpointReader {
 public:
  // Reads and checks metadata.json; throws InputError naming it when missing or invalid.
  explicit CheckpointReader(std::filesystem::path step_dir);

  const Metadata& metadata() const { return metadata_; }
  const std::filesystem::path& step_dir() const { return step_dir_; }

  // Fills `target` in place with the box at `offsets` (one per dimension) of the shared tensor
  // part/key, whose global shape must be `global_shape`. Converts the dtype if needed.
  // Throws InputError naming the key (missing, other shape, box not covered) or the file
  // (missing, truncated, checksum mismatch).
  void read_into(const std::string& part, const std::string& key, torch::Tensor target,
                 const std::vector<int64_t>& offsets, const std::vector<int64_t>& global_shape);
  // The whole tensor part/key as saved (owner `rank` for per-rank parts, -1 for shared ones).
  torch::Tensor read_whole(const std::string& part, const std::string& key, int rank = -1);
  // The keys saved for `part` and owner `rank`.
  std::vector<std::string> keys(const std::string& part, int rank = -1) const;
  // Reads and verifies every slice: what `ctitan checkpoint inspect --verify` does.
  void verify_all();

 private:
  std::vector<const SliceEntry*> entries_of(const std::string& part, const std::string& key, int rank) const;
  torch::Tensor read_entry(const SliceEntry& e);  // shaped e.shape, verified

  std::filesystem::path step_dir_;
  Metadata metadata_;
};

}  // namespace ctitan::checkpoint
