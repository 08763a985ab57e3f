#include "ctitan/common/json_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <type_traits>

#include "ctitan/common/error.h"

namespace ctitan {

template <typename T>
T require_field(const nlohmann::json& config, const std::string& key, const std::string& source) {
  if (!config.contains(key) || config[key].is_null()) {
    throw InputError(fmt::format("{}: missing key '{}'", source, key));
  }
  const auto& v = config[key];
  bool ok = std::is_integral_v<T> ? v.is_number_integer() : std::is_floating_point_v<T> ? v.is_number() : true;
  if (ok) {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  throw InputError(fmt::format("{}: key '{}' has the wrong type ({})", source, key, v.dump()));
}

template int64_t require_field<int64_t>(const nlohmann::json&, const std::string&, const std::string&);
template double require_field<double>(const nlohmann::json&, const std::string&, const std::string&);

int64_t require_size(const nlohmann::json& config, const std::string& key, const std::string& source) {
  constexpr int64_t kMaxSize = int64_t(1) << 31;
  auto v = require_field<int64_t>(config, key, source);
  if (v <= 0 || v > kMaxSize) {
    throw InputError(fmt::format("{}: key '{}' must be a positive integer up to {} (got {})", source, key, kMaxSize,
                                 config[key].dump()));
  }
  return v;
}

double require_positive(const nlohmann::json& config, const std::string& key, const std::string& source) {
  auto v = require_field<double>(config, key, source);
  if (!std::isfinite(v) || v <= 0) {
    throw InputError(fmt::format("{}: key '{}' must be a finite number > 0 (got {})", source, key, config[key].dump()));
  }
  return v;
}

void require_absent_or(const nlohmann::json& config, const std::string& key, const nlohmann::json& expected,
                       const std::string& source) {
  if (config.contains(key) && !config[key].is_null() && config[key] != expected) {
    throw InputError(fmt::format("{}: key '{}' is {}; ctitan supports only {}", source, key,
                                 config[key].dump(), expected.dump()));
  }
}

bool optional_bool(const nlohmann::json& config, const std::string& key, bool fallback, const std::string& source) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_boolean()) {
    throw InputError(fmt::format("{}: key '{}' must be true or false (got {})", source, key, config[key].dump()));
  }
  return config[key].get<bool>();
}

}  // namespace ctitan
