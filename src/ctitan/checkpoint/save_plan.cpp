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
      LocalSlice s{part, key, is_per_rank_part(part) ? rank : -1, tensor, tensor.sizes().vec(),
                   std::vector<int64_t>(size_t(tensor.dim()), 0)};
      if (part_layouts != layouts.end()) {
        auto layout = part_layouts->second.find(key);
        if (layout != part_layouts->second.end()) {
          s.global_shape = layout->second.global_shape;
          s.offsets = layout->second.full_offsets();
          bool fits = tensor.dim() > 0 && s.global_shape.size() == size_t(tensor.dim()) &&
                      layout->second.offsets.size() <= s.global_shape.size();
          for (int64_t d = 0; fits && d < tensor.dim(); ++d) {
            fits = s.offsets[size_t(d)] >= 0 && s.offsets[size_t(d)] + tensor.size(d) <= s.global_shape[size_t(d)];
          }
          if (!fits) {
            throw InputError(fmt::format("checkpoint error: rank {}: {}/{} of shape {} does not fit its layout "
                                         "(at [{}] of {})", rank, part, key, fmt::join(tensor.sizes(), "x"),
                                         fmt::join(s.offsets, ", "), fmt::join(s.global_shape, "x")));
          }
        }
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::string slice_identity(const LocalSlice& s) {
  return fmt::format("{}\t{}\t{}\t{}\t{}", s.part, s.key, s.rank, fmt::join(s.offsets, ","),
                     fmt::join(s.tensor.sizes(), ","));
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
