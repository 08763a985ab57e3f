#include "ctitan/checkpoint/state_loader.h"

#include <fmt/format.h>

#include "ctitan/checkpoint/save_plan.h"
#include "ctitan/common/error.h"

namespace ctitan::checkpoint {

int source_rank(CheckpointReader& reader, const std::string& part, const RankPlace& place) {
  const auto& m = reader.metadata();
  if (part == "dataloader") {
    if (m.dp_degree == place.dp_degree) {
      for (int r = 0; r < m.world_size; ++r) {
        if (m.dp_rank_of[size_t(r)] == place.dp_rank) return r;
      }
    }
    int furthest = 0;
    int64_t furthest_window = -1;
    for (int r = 0; r < m.world_size; ++r) {
      auto window = reader.read_whole(part, "window_index", r).item<int64_t>();
      if (window > furthest_window) furthest = r, furthest_window = window;
    }
    return furthest;
  }
  return place.rank < m.world_size ? place.rank : 0;
}

void load_into(CheckpointReader& reader, std::map<std::string, StateDict>& state,
               const std::map<std::string, ShardLayouts>& layouts, const RankPlace& place,
               const std::set<std::string>& parts) {
  for (auto& [part, dict] : state) {
    if (!parts.count(part)) continue;
    if (is_per_rank_part(part)) {
      const int source = source_rank(reader, part, place);
      StateDict loaded;
      for (const auto& key : reader.keys(part, source)) loaded[key] = reader.read_whole(part, key, source);
      for (const auto& [key, live] : dict) {
        // A mixture's sources ("mixture.<i>.*") are checked by the mixture itself, which can say
        // that the checkpoint read one dataset, or other datasets, rather than that a key is missing.
        if (!loaded.count(key) && key.rfind("mixture.", 0) != 0) {
          throw InputError(fmt::format("checkpoint error: {} holds no {}/{} of rank {}", reader.step_dir().string(),
                                       part, key, source));
        }
      }
      dict = std::move(loaded);
      continue;
    }
    auto part_layouts = layouts.find(part);
    for (auto& [key, live] : dict) {
      std::vector<int64_t> global_shape = live.sizes().vec();
      std::vector<int64_t> offsets(global_shape.size(), 0);
      if (part_layouts != layouts.end()) {
        auto layout = part_layouts->second.find(key);
        if (layout != part_layouts->second.end()) {
          global_shape = layout->second.global_shape;
          offsets = layout->second.full_offsets();
        }
      }
      reader.read_into(part, key, live, offsets, global_shape);
    }
  }
}

}  // namespace ctitan::checkpoint
