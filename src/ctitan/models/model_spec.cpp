// The registry's one list of families. Explicit rather than self-registering statics: ctitan is a
// static library, and the linker drops an object file nothing references.
#include "ctitan/models/model_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ctitan/common/error.h"
#include "ctitan/common/message_text.h"
#include "ctitan/models/deepseek_v3/flavors.h"
#include "ctitan/models/llama3/flavors.h"
#include "ctitan/models/qwen3/flavors.h"
#include "ctitan/models/qwen3_moe/flavors.h"

namespace ctitan::models {

const std::vector<ModelSpec>& model_specs() {
  static const std::vector<ModelSpec> specs{llama3::spec(), qwen3::spec(), qwen3_moe::spec(), deepseek_v3::spec()};
  return specs;
}

const std::string& default_model_name() { return model_specs().front().name; }

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& s : model_specs()) names.push_back(s.name);
  return names;
}

const ModelSpec& model_spec(const std::string& name) {
  const std::string& key = name.empty() ? default_model_name() : name;
  for (const auto& s : model_specs()) {
    if (s.name == key) return s;
  }
  throw ConfigError(fmt::format("model.name '{}' is unknown (known: {})", one_line(name), fmt::join(model_names(), ", ")));
}

const ModelSpec* model_spec_for_hf_type(const std::string& model_type) {
  for (const auto& s : model_specs()) {
    if (s.hf.model_type == model_type) return &s;
  }
  return nullptr;
}

std::vector<std::string> flavor_names(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& [flavor, _] : model_spec(name).flavors) names.push_back(flavor);
  return names;
}

ModelArgs model_flavor(const std::string& name, const std::string& flavor) {
  for (const auto& [key, args] : model_spec(name).flavors) {
    if (key == flavor) return args;
  }
  throw ConfigError(fmt::format("model.flavor '{}' is unknown for {} (known: {})", one_line(flavor), model_spec(name).name,
                                fmt::join(flavor_names(name), ", ")));
}

}  // namespace ctitan::models
