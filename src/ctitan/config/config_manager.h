#pragma once
// Builds a JobConfig from a TOML file plus `--section.key value` overrides, and validates it.
// Every failure is a ctitan::ConfigError naming the key (exit code 2).
#include <string>
#include <vector>

#include "ctitan/config/job_config.h"

namespace ctitan::config {

// The largest config file read: real ones are a few KiB (common/input_file.h says why a bound).
constexpr int64_t kMaxConfigFileBytes = int64_t(16) << 20;

// `toml_path` may be empty (defaults only). `overrides` are the raw command-line words, in the
// forms `--section.key value`, `--section.key=value` and `--section.no_key` (a bool set to false).
JobConfig load_job_config(const std::string& toml_path, const std::vector<std::string>& overrides);

// Parses a TOML document given as text; `origin` names it in error messages.
JobConfig parse_job_config(const std::string& toml_text, const std::string& origin,
                           const std::vector<std::string>& overrides = {});

// Range and consistency checks that involve more than one key.
void validate(const JobConfig& config);

// The resolved config as TOML text: printed with job.print_config and hashed by rendezvous.
std::string to_toml(const JobConfig& config);

// "model.n_layers = 8 (this job: 6)" (values as value_text writes them) for each key of `section` whose value in `other` differs
// from `current`'s, in the field table's order: what changed between a saved job and this one.
std::vector<std::string> section_differences(const JobConfig& other, const JobConfig& current,
                                             const std::string& section);

}  // namespace ctitan::config
