#include "ctitan/ops/fusion_switch.h"

#include <cstdlib>
#include <set>
#include <sstream>

namespace ctitan::ops {

bool fused_enabled(const std::string& op) {
  static const std::set<std::string> disabled = [] {
    std::set<std::string> names;
    const char* env = std::getenv("CTITAN_DISABLE_FUSED");
    std::stringstream list(env ? env : "");
    for (std::string name; std::getline(list, name, ',');) names.insert(name);
    return names;
  }();
  return !disabled.count(op) && !disabled.count("all");
}

}  // namespace ctitan::ops
