#pragma once
// The table of every config key: its dotted name and the struct member it sets. Parsing TOML,
// applying overrides and printing the config all walk this one table, so a key added here is
// automatically accepted, overridable and printed.
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "ctitan/config/job_config.h"

namespace ctitan::config {

// A key whose value is one of a few names, held in the config as an enum or a dtype.
struct Choice {
  std::vector<std::string> names;   // the accepted TOML values
  std::function<void(size_t)> set;  // stores the value that names[i] stands for
  std::function<size_t()> current;  // the index in `names` of the stored value
  std::string allowed() const;      // "a, b or c", for error messages
};

// A list of lists of strings (parallelism.module_fqns_per_model_part); a TOML array of arrays.
using StringTable = std::vector<std::vector<std::string>>;

// [[training.datasets]]: a TOML array of tables (inline tables too).
using DatasetSources = std::vector<DatasetSource>;

struct Field {
  std::string section;
  std::string key;
  std::variant<int64_t*, double*, bool*, std::string*, StringTable*, DatasetSources*, Choice> target;
  std::string help;  // one line, shown by `ctitan train --help`
  std::string dotted() const { return section + "." + key; }
};

std::vector<Field> config_fields(JobConfig& config);

// A field's current value as text: 10000, 0.0003, true, "llama3", [["a", "b"]], a choice's name,
// [{path = "a", weight = 1, ...}].
std::string value_text(const Field& f);

// The TOML inline table of one mixture entry: {path = "a", format = "auto", weight = 1, ...}.
std::string dataset_source_text(const DatasetSource& source);

// The TOML name of a choice value, for logs: name_of(GradientSync::kLastMicrobatch) is
// "last_microbatch".
std::string name_of(DecayType v);
std::string name_of(ReshardAfterForward v);
std::string name_of(GradientSync v);
std::string name_of(CpRotateMethod v);
std::string name_of(DeviceChoice v);
std::string name_of(PsMode v);
std::string name_of(AsyncMode v);
std::string name_of(ActivationCheckpointMode v);

}  // namespace ctitan::config
