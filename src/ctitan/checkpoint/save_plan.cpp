#include "ctitan/checkpoint/save_plan.h"

#include <fmt/format.h>

#include <sstream>
#include <unordered_set>

#include "ctitan/common/error.h"

namespace ctitan::checkpoint {

bool is_per_rank_part(const std::string& part) { return part == "dataloader" || part == "rng"; }

std::vector<LocalSlice> local_slices(const std::map<std::string, StateDict>& state,
                                     const std::map<std::string, ShardLayouts>& layouts, int rank) {
  std::vector<LocalSlice> out;
  for (const auto& [part, dict] : state) {
    auto part_layouts = layouts.find(part);
    for (const auto& [key, tensor] : dict) {
      LocalSlice s{part, key, is_per_rank_part(part) ? rank : -1, tensor, tensor.sizes().vec(), 0};
      if (part_layouts != layouts.end()) {
        auto layout = part_layouts->second.find(key);
        if (layout != part_layouts->second.end()) {
          s.global_shape = layout->second.global_shape;
          s.row_offset = layout->second.row_offset;
          if (tensor.dim() == 0 || s.global_shape.size() != size_t(tensor.dim()) ||
              s.row_offset + tensor.size(0) > s.global_shape[0]) {
            throw InputError(fmt::format("checkpoint error: rank {}: {}/{} of shape {} does not fit its layout "
                                         "(rows from {} of {})", rank, part, key, fmt::join(tensor.sizes(), "x"),
                                         s.row_offset, fmt::join(s.global_shape, "x")));
          }
        }
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::string slice_identity(const LocalSlice& s) {
  int64_t rows = s.tensor.dim() == 0 ? 0 : s.tensor.size(0);
  return fmt::format("{}\t{}\t{}\t{}\t{}", s.part, s.key, s.rank, s.row_offset, rows);
}

std::string plan_text(const std::vector<LocalSlice>& slices) {
  std::string text;
  for (const auto& s : slices) text += slice_identity(s) + "\n";
  return text;
}

std::vector<LocalSlice> slices_to_write(const std::vector<std::string>& plans, int rank,
                                        std::vector<LocalSlice> mine) {
  std::unordered_set<std::string> held_below;
  for (int r = 0; r < rank; ++r) {
    std::istringstream lines(plans[size_t(r)]);
    for (std::string line; std::getline(lines, line);) held_below.insert(line);
  }
  std::vector<LocalSlice> out;
  for (auto& s : mine) {
    if (!held_below.count(slice_identity(s))) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace ctitan::checkpoint
