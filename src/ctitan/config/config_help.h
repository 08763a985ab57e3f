#pragma once
// What a person reads to learn the config: every key with its type, default and meaning (for
// `ctitan train --help`), and the nearest key to a misspelt one.
#include <optional>
#include <string>

namespace ctitan::config {

// One line per key, grouped by section: "  training.steps  integer = 10000  optimizer steps to run".
std::string keys_help();

// The dotted key closest to `dotted` by edit distance, if one is close enough to be a typo
// (at most a third of the key's length, and at most 4 edits).
std::optional<std::string> nearest_key(const std::string& dotted);

}  // namespace ctitan::config
