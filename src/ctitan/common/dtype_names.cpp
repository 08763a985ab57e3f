#include "ctitan/common/dtype_names.h"

#include <utility>
#include <vector>

namespace ctitan {
namespace {

const std::vector<std::pair<c10::ScalarType, const char*>> kNames = {
    {c10::kFloat, "float32"}, {c10::kDouble, "float64"}, {c10::kBFloat16, "bfloat16"}, {c10::kHalf, "float16"},
    {c10::kLong, "int64"},    {c10::kInt, "int32"},      {c10::kShort, "int16"},       {c10::kChar, "int8"},
    {c10::kByte, "uint8"},    {c10::kBool, "bool"}};

}  // namespace

std::optional<std::string> dtype_name(c10::ScalarType dtype) {
  for (const auto& [type, name] : kNames) {
    if (type == dtype) return name;
  }
  return std::nullopt;
}

std::optional<c10::ScalarType> dtype_from_name(std::string_view name) {
  for (const auto& [type, n] : kNames) {
    if (n == name) return type;
  }
  return std::nullopt;
}

}  // namespace ctitan
