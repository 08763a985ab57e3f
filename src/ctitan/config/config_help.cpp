#include "ctitan/config/config_help.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

#include "ctitan/config/config_fields.h"

namespace ctitan::config {
namespace {

std::string type_and_default(const Field& f) {
  struct Visitor {
    std::string operator()(int64_t*) const { return "integer"; }
    std::string operator()(double*) const { return "number"; }
    std::string operator()(bool*) const { return "boolean"; }
    std::string operator()(std::string*) const { return "string"; }
    std::string operator()(StringTable*) const { return "array of string arrays"; }
    std::string operator()(DatasetSources*) const { return "array of tables"; }
    std::string operator()(const Choice& c) const { return fmt::format("{}", fmt::join(c.names, "|")); }
  };
  return std::visit(Visitor{}, f.target) + " = " + value_text(f);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string keys_help() {
  JobConfig defaults;
  auto fields = config_fields(defaults);
  size_t width = 0;
  for (const auto& f : fields) width = std::max(width, f.dotted().size());
  std::string out = "Config keys: [section] key = value in the TOML file, or --section.key VALUE here.\n";
  std::string section;
  for (const auto& f : fields) {
    if (f.section != section) {
      section = f.section;
      out += fmt::format("\n[{}]\n", section);
    }
    out += fmt::format("  {:<{}}  {}\n  {:<{}}    {}\n", f.dotted(), width, type_and_default(f), "", width, f.help);
  }
  return out;
}

std::optional<std::string> nearest_key(const std::string& dotted) {
  JobConfig scratch;
  std::optional<std::string> best;
  size_t best_distance = std::min<size_t>(4, dotted.size() / 3) + 1;
  for (const auto& f : config_fields(scratch)) {
    // The distance is at least the length difference: a long unknown key (a fuzzer's, or a
    // pasted paragraph) skips the quadratic comparison instead of stalling the parse.
    const std::string key = f.dotted();
    if (std::max(dotted.size(), key.size()) - std::min(dotted.size(), key.size()) >= best_distance) continue;
    size_t d = edit_distance(dotted, key);
    if (d < best_distance) {
      best_distance = d;
      best = f.dotted();
    }
  }
  return best;
}

}  // namespace ctitan::config
