// `ctitan checkpoint inspect DIR [--verify] [--tensors]`: what a checkpoint folder or step
// directory holds, and with --verify whether every slice still matches its checksum.
#include <fmt/format.h>

#include <map>
#include <set>

#include "ctitan/checkpoint/metadata.h"
#include "ctitan/checkpoint/reader.h"
#include "ctitan/checkpoint/retention.h"
#include "ctitan/cli/commands.h"
#include "ctitan/common/error.h"

namespace ctitan::cli {
namespace {

void inspect_step(const std::filesystem::path& dir, bool verify, bool tensors) {
  checkpoint::CheckpointReader reader(dir);
  const auto& m = reader.metadata();
  fmt::print("{}: step {}{}, saved by {} rank(s), dp degree {}, config hash {}\n", dir.string(), m.step,
             m.model_only ? " (model only)" : "", m.world_size, m.dp_degree, m.config_hash);
  struct PartTotals {
    std::set<std::string> keys;
    int64_t slices = 0, bytes = 0;
  };
  std::map<std::string, PartTotals> parts;
  std::map<std::string, int64_t> files;
  for (const auto& e : m.entries) {
    auto& p = parts[e.part];
    p.keys.insert(e.rank >= 0 ? fmt::format("{}@{}", e.key, e.rank) : e.key);
    p.slices += 1;
    p.bytes += e.nbytes;
    files[e.file] += e.nbytes;
  }
  for (const auto& [name, p] : parts) {
    fmt::print("  part {:<13} {:>5} tensors {:>6} slices {:>12} bytes\n", name, p.keys.size(), p.slices, p.bytes);
  }
  for (const auto& [file, bytes] : files) fmt::print("  file {} ({} bytes of tensors)\n", file, bytes);
  if (tensors) {
    for (const auto& e : m.entries) {
      fmt::print("  {}/{}{} {} global [{}] slice {} in {} @{} crc32 {:08x}\n", e.part, e.key,
                 e.rank >= 0 ? fmt::format(" (rank {})", e.rank) : "", e.dtype, fmt::join(e.global_shape, ", "),
                 checkpoint::box_text(e.offsets, e.shape), e.file, e.offset, e.crc32);
    }
  }
  if (verify) {
    reader.verify_all();  // throws InputError naming the bad file
    fmt::print("  verified: all {} slices match their checksums\n", m.entries.size());
  }
}

}  // namespace

void add_checkpoint_inspect(CLI::App& checkpoint) {
  auto* cmd = checkpoint.add_subcommand("inspect", "Describe a checkpoint folder or step directory");
  auto dir = std::make_shared<std::string>();
  auto verify = std::make_shared<bool>(false);
  auto tensors = std::make_shared<bool>(false);
  cmd->add_option("dir", *dir, "a step-N directory or a checkpoint folder")->required();
  cmd->add_flag("--verify", *verify, "read every slice and check its checksum");
  cmd->add_flag("--tensors", *tensors, "list every saved slice");
  cmd->callback([dir, verify, tensors] {
    std::filesystem::path path(*dir);
    if (!std::filesystem::is_directory(path)) throw InputError(fmt::format("checkpoint error: {} is not a directory", *dir));
    if (std::filesystem::exists(path / checkpoint::kMetadataFile) ||
        checkpoint::parse_step_dir_name(path.filename().string())) {
      inspect_step(path, *verify, *tensors);
      return;
    }
    auto steps = checkpoint::list_step_dirs(path);
    if (steps.complete.empty() && steps.incomplete.empty()) {
      throw InputError(fmt::format("checkpoint error: {} holds no step-N directories", *dir));
    }
    for (auto step : steps.incomplete) fmt::print("{}: incomplete (no metadata.json)\n", (path / checkpoint::step_dir_name(step)).string());
    for (auto step : steps.complete) inspect_step(path / checkpoint::step_dir_name(step), *verify, *tensors);
  });
}

}  // namespace ctitan::cli
