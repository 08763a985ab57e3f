#pragma once
// Reading typed fields of a JSON object (a config.json) with one-line errors naming the source
// and the key: nlohmann's get<> converts freely (true -> 1, 64.9 -> 64), and a config that says
// either is wrong. Used by checkpoint/hf and by each family's HF adapter (models/<family>/).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace ctitan {

// The JSON type is checked first: integers for integral T, any number for floating T.
template <typename T>
T require_field(const nlohmann::json& config, const std::string& key, const std::string& source);

// An integer in [1, 2^31]: sizes beyond are no model ctitan builds and would overflow the shape
// arithmetic (vocab x dim, 4 x dim).
int64_t require_size(const nlohmann::json& config, const std::string& key, const std::string& source);

// A finite number > 0 (rms_norm_eps, rope_theta: eps <= 0 divides by zero on a zero row; a
// non-positive theta makes every RoPE frequency NaN or infinite).
double require_positive(const nlohmann::json& config, const std::string& key, const std::string& source);

// A key that must hold `expected` when present: a feature ctitan's models do not have.
void require_absent_or(const nlohmann::json& config, const std::string& key, const nlohmann::json& expected,
                       const std::string& source);

// `key` as a boolean, `fallback` when absent or null.
bool optional_bool(const nlohmann::json& config, const std::string& key, bool fallback, const std::string& source);

}  // namespace ctitan
