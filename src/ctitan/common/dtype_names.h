#pragma once
// dtype names as PyTorch spells them (str(torch.float32) without "torch."): the one table that
// configs, checkpoint metadata, HF config.json's torch_dtype and CLI flags share.
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <string_view>

namespace ctitan {

// "float32", "float64", "bfloat16", "float16", "int64", "int32", "int16", "int8", "uint8", "bool";
// nullopt for a dtype without a name here.
std::optional<std::string> dtype_name(c10::ScalarType dtype);
// The inverse; nullopt for a name that is not in the table.
std::optional<c10::ScalarType> dtype_from_name(std::string_view name);

}  // namespace ctitan
