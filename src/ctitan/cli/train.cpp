// `ctitan train --config FILE [--section.key value ...]`
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "ctitan/cli/commands.h"
#include "ctitan/common/folder_lock.h"
#include "ctitan/common/threads.h"
#include "ctitan/distributed/dist_env.h"
#include "ctitan/common/input_file.h"
#include "ctitan/config/config_help.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/train/trainer.h"

namespace ctitan::cli {

CLI::Validator config_file_check() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        if (path.empty()) return "the path is empty";
        std::error_code ec;
        auto status = std::filesystem::status(path, ec);
        if (status.type() == std::filesystem::file_type::not_found) return path + " does not exist";
        if (std::filesystem::is_directory(status)) return path + " is a directory, not a TOML file";
        // Before opening: opening a FIFO blocks until a writer comes.
        if (auto why = unreadable_input_reason(path, config::kMaxConfigFileBytes)) return path + " " + *why;
        std::ifstream in(path);
        if (!in) return fmt::format("{} cannot be read: {}", path, std::strerror(errno));
        return "";
      },
      "FILE");
}

CLI::App* add_job_subcommand(CLI::App& app, const std::string& name, const std::string& description,
                             std::function<void(config::JobConfig)> run) {
  auto* cmd = app.add_subcommand(name, description);
  auto config_path = std::make_shared<std::string>();
  cmd->add_option("--config,--job.config_file", *config_path, "TOML job config")->check(config_file_check());
  // Overrides are not declared to CLI11: the config table is their single definition, and
  // config::load_job_config rejects unknown keys with the key's name.
  cmd->allow_extras();
  cmd->footer(config::keys_help());
  cmd->callback([cmd, config_path, run = std::move(run)] {
    auto config = config::load_job_config(*config_path, cmd->remaining());
    configure_threads();
    if (config.job.print_config) std::cout << config::to_toml(config) << std::flush;
    if (!config.job.description.empty()) spdlog::info("job: {}", config.job.description);
    // One run per dump folder: global rank 0 holds the lock until the run ends; a refused rank 0
    // exits 2 and the launcher stops the other ranks.
    std::optional<FolderLock> dump_folder_lock;
    if (distributed::read_dist_env().rank == 0) dump_folder_lock.emplace(config.job.dump_folder, "job.dump_folder");
    run(std::move(config));
  });
  return cmd;
}

void add_train_command(CLI::App& app) {
  add_job_subcommand(app, "train", "Train a model (TOML config plus --section.key value overrides)",
                     [](config::JobConfig config) {
                       train::Trainer trainer(std::move(config));
                       trainer.train();
                     });
}

}  // namespace ctitan::cli
