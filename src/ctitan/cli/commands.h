#pragma once
// One function per subcommand; each registers its CLI11 options and a callback on `app`.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "ctitan/config/job_config.h"

namespace ctitan::cli {

void add_train_command(CLI::App& app);
void add_tokenizer_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_run_command(CLI::App& app);
// `ctitan checkpoint ...`: a group; each subcommand registers itself on it (checkpoint.cpp).
void add_checkpoint_command(CLI::App& app);
void add_checkpoint_inspect(CLI::App& checkpoint);
// `checkpoint export|import`; creates the `checkpoint` group if no other command has.
void add_checkpoint_export_commands(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_estimate_command(CLI::App& app);
// `ctitan ps`: the parameter server (ps.cpp, src/ctitan/ps/).
void add_ps_command(CLI::App& app);

// The check on every `--config` option (train.cpp): the path must name a readable file. A
// directory (which would read as an empty config), a missing or unreadable file is a usage
// error naming the flag and the path, before any work starts.
CLI::Validator config_file_check();

// A subcommand that runs a job from `--config FILE [--section.key value ...]` (train, ps): it loads
// the config (unknown keys are errors naming the key), sets the threads, prints the config when
// job.print_config asks and the description, then hands the config to `run` (train.cpp).
CLI::App* add_job_subcommand(CLI::App& app, const std::string& name, const std::string& description,
                             std::function<void(config::JobConfig)> run);

}  // namespace ctitan::cli
