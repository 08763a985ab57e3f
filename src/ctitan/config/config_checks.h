#pragma once
// What a resolved JobConfig must satisfy before anything is built: finite numbers, known names
// and choices, positive sizes and degrees, bounds far beyond any job (so that no size, product
// or step arithmetic overflows), output folders that are neither empty nor a filesystem root.
#include "ctitan/config/job_config.h"

namespace ctitan::config {

// A ConfigError naming the first key at fault and its value. Messages quote the user's values,
// which may hold control characters: callers escape them into one line (config_manager.cpp).
void check_config(const JobConfig& c);

}  // namespace ctitan::config
