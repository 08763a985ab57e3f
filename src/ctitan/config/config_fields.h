#pragma once
// The table of every config key: its dotted name and the struct member it sets. Parsing TOML,
// applying overrides and printing the config all walk this one table, so a key added here is
// automatically accepted, overridable and printed.
#include <string>
#include <variant>
#include <vector>

#include "ctitan/config/job_config.h"

namespace ctitan::config {

struct Field {
  std::string section;
  std::string key;
  std::variant<int64_t*, double*, bool*, std::string*> target;
  std::string dotted() const { return section + "." + key; }
};

std::vector<Field> config_fields(JobConfig& config);

}  // namespace ctitan::config
