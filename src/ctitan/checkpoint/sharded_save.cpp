#include "ctitan/checkpoint/sharded_save.h"

#include <fmt/format.h>

#include "ctitan/checkpoint/metadata.h"
#include "ctitan/common/atomic_file.h"
#include "ctitan/checkpoint/writer.h"
#include "ctitan/common/error.h"

namespace ctitan::checkpoint {
namespace {

// Every rank learns rank 0's `status` ("" = success) and throws the same error if it is not empty.
void agree_on(Coordinator& coordinator, const std::string& status, const SaveRequest& request) {
  auto all = coordinator.all_gather(coordinator.rank() == 0 ? status : "");
  if (!all[0].empty()) {
    throw IoError(fmt::format("checkpoint save of {} failed ({}); older checkpoints are intact",
                                 request.step_dir.string(), all[0]));
  }
}

}  // namespace

std::vector<LocalSlice> plan_save(Coordinator& coordinator, const SaveRequest& request,
                                  std::vector<LocalSlice> mine) {
  std::string status;
  if (coordinator.rank() == 0) {
    // Re-saving a step (after a fallback past a corrupt copy of it) must never leave the old
    // metadata pointing at half-rewritten files.
    std::error_code ec;
    std::filesystem::remove(request.step_dir / kMetadataFile, ec);
    std::filesystem::create_directories(request.step_dir, ec);
    if (ec) status = fmt::format("cannot create {}: {}", request.step_dir.string(), ec.message());
  }
  agree_on(coordinator, status, request);
  auto plans = coordinator.all_gather(plan_text(mine));
  return slices_to_write(plans, coordinator.rank(), std::move(mine));
}

void execute_save(Coordinator& coordinator, const SaveRequest& request, const std::vector<LocalSlice>& to_write) {
  nlohmann::json result = {{"dp_rank", request.dp_rank}, {"error", ""}, {"entries", nlohmann::json::array()}};
  try {
    for (const auto& e : write_rank_file(request.step_dir, coordinator.rank(), to_write)) {
      result["entries"].push_back(entry_to_json(e));
    }
  } catch (const std::exception& e) {
    result["error"] = e.what();
  }
  auto results = coordinator.all_gather(result.dump());

  std::string status;
  if (coordinator.rank() == 0) {
    Metadata m;
    m.step = request.step;
    m.model_only = request.model_only;
    m.world_size = coordinator.world_size();
    m.dp_degree = request.dp_degree;
    m.config_toml = request.config_toml;
    m.config_hash = config_hash(request.config_toml);
    m.tokenizer_fingerprint = request.tokenizer_fingerprint;
    std::vector<std::string> errors;
    for (const auto& text : results) {
      auto j = nlohmann::json::parse(text);
      errors.push_back(j.at("error").get<std::string>());
      m.dp_rank_of.push_back(j.at("dp_rank").get<int>());
      for (const auto& je : j.at("entries")) m.entries.push_back(entry_from_json(je));
    }
    status = join_rank_errors(errors);
    if (status.empty()) {
      try {
        write_file_atomically(request.step_dir / kMetadataFile, to_json(m));
      } catch (const std::exception& e) {
        status = fmt::format("rank 0: {}", e.what());
      }
    }
    if (!status.empty()) {
      std::error_code ec;  // free the space the incomplete step took
      std::filesystem::remove_all(request.step_dir, ec);
    }
  }
  agree_on(coordinator, status, request);
}

void save(Coordinator& coordinator, const SaveRequest& request, std::vector<LocalSlice> mine) {
  execute_save(coordinator, request, plan_save(coordinator, request, std::move(mine)));
}

}  // namespace ctitan::checkpoint
