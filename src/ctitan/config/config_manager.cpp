#include "ctitan/config/config_manager.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <toml++/toml.h>

#include "ctitan/common/error.h"
#include "ctitan/common/input_file.h"
#include "ctitan/common/message_text.h"
#include "ctitan/config/config_checks.h"
#include "ctitan/config/config_fields.h"
#include "ctitan/config/config_help.h"

namespace ctitan::config {
namespace {

Field* find_field(std::vector<Field>& fields, const std::string& section, const std::string& key) {
  for (auto& f : fields) {
    if (f.section == section && f.key == key) return &f;
  }
  return nullptr;
}

bool has_section(const std::vector<Field>& fields, const std::string& section) {
  for (const auto& f : fields) {
    if (f.section == section) return true;
  }
  return false;
}

std::string type_name(const Field& f) {
  struct Visitor {
    std::string operator()(int64_t*) const { return "an integer"; }
    std::string operator()(double*) const { return "a number"; }
    std::string operator()(bool*) const { return "a boolean"; }
    std::string operator()(std::string*) const { return "a string"; }
    std::string operator()(StringTable*) const { return "an array of arrays of strings"; }
    std::string operator()(DatasetSources*) const { return "an array of tables ([[training.datasets]])"; }
    std::string operator()(const Choice& c) const { return c.allowed(); }
  };
  return std::visit(Visitor{}, f.target);
}

// Sets a choice from its name; false when `text` is not one of the names.
bool set_choice(const Choice& c, const std::string& text) {
  for (size_t i = 0; i < c.names.size(); ++i) {
    if (c.names[i] == text) {
      c.set(i);
      return true;
    }
  }
  return false;
}

// " (did you mean --training.steps?)" for a near miss, else "".
std::string did_you_mean(const std::string& dotted) {
  auto near = nearest_key(dotted);
  return near ? fmt::format(" (did you mean {}?)", *near) : "";
}

// [["a", "b"], ["c"]] as a StringTable; nullopt when any level has another type.
std::optional<StringTable> string_table(const toml::node& node) {
  const toml::array* outer = node.as_array();
  if (!outer) return std::nullopt;
  StringTable table;
  for (const toml::node& row_node : *outer) {
    const toml::array* row = row_node.as_array();
    if (!row) return std::nullopt;
    auto& out = table.emplace_back();
    for (const toml::node& cell : *row) {
      if (!cell.is_string()) return std::nullopt;
      out.push_back(*cell.value<std::string>());
    }
  }
  return table;
}

// [[training.datasets]] (or an inline array of inline tables) as DatasetSources; nullopt when
// `node` is not an array of tables. A wrong key or type inside an entry is a ConfigError naming it.
std::optional<DatasetSources> dataset_sources(const toml::node& node, const std::string& origin, const std::string& key) {
  const toml::array* entries = node.as_array();
  if (!entries) return std::nullopt;
  DatasetSources sources;
  for (size_t i = 0; i < entries->size(); ++i) {
    const toml::table* entry = (*entries)[i].as_table();
    if (!entry) return std::nullopt;
    const std::string where = fmt::format("{}[{}]", key, i);
    DatasetSource& s = sources.emplace_back();
    for (const auto& [k, value] : *entry) {
      const std::string name(k.str());
      std::string* text = name == "path" ? &s.path : name == "format" ? &s.format
                        : name == "text_column" ? &s.text_column : name == "name" ? &s.name : nullptr;
      if (text) {
        if (!value.is_string()) throw ConfigError(fmt::format("{}: {}.{} must be a string", origin, where, name));
        *text = *value.value<std::string>();
      } else if (name == "weight") {
        if (!value.is_number()) throw ConfigError(fmt::format("{}: {}.weight must be a number", origin, where));
        s.weight = *value.value<double>();
      } else {
        throw ConfigError(fmt::format("{}: unknown key {}.{} (path, format, weight, text_column, name)", origin, where, name));
      }
    }
    if (s.path.empty()) throw ConfigError(fmt::format("{}: {}.path is not set", origin, where));
  }
  return sources;
}

toml::array to_toml_array(const DatasetSources& sources) {
  toml::array out;
  for (const auto& s : sources) {
    toml::table entry{{"path", s.path}, {"format", s.format}, {"weight", s.weight}, {"text_column", s.text_column},
                      {"name", s.name}};
    entry.is_inline(true);  // printed inside [training]: a [[datasets]] header would leave it
    out.push_back(std::move(entry));
  }
  return out;
}

toml::array to_toml_array(const StringTable& table) {
  toml::array outer;
  for (const auto& row : table) {
    toml::array inner;
    for (const auto& cell : row) inner.push_back(cell);
    outer.push_back(std::move(inner));
  }
  return outer;
}

void set_from_toml(Field& f, const toml::node& node, const std::string& origin) {
  if (const auto* c = std::get_if<Choice>(&f.target)) {
    if (node.is_string() && set_choice(*c, *node.value<std::string>())) return;
    std::string got = node.is_string() ? fmt::format("'{}'", *node.value<std::string>())
                                       : std::string(toml::impl::node_type_friendly_names[int(node.type())]);
    throw ConfigError(fmt::format("{}: {} must be {} (got {})", origin, f.dotted(), c->allowed(), got));
  }
  bool ok = std::visit(
      [&](auto& target) {
        using T = std::remove_pointer_t<std::decay_t<decltype(target)>>;
        if constexpr (std::is_same_v<T, Choice>) {
          return false;  // handled above
        } else if constexpr (std::is_same_v<T, double>) {
          if (auto v = node.value<double>(); v && (node.is_floating_point() || node.is_integer())) {
            *target = *v;
            return true;
          }
        } else if constexpr (std::is_same_v<T, int64_t>) {
          if (node.is_integer()) {
            *target = *node.value<int64_t>();
            return true;
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          if (node.is_boolean()) {
            *target = *node.value<bool>();
            return true;
          }
        } else if constexpr (std::is_same_v<T, StringTable>) {
          if (auto table = string_table(node)) {
            *target = std::move(*table);
            return true;
          }
        } else if constexpr (std::is_same_v<T, DatasetSources>) {
          if (auto sources = dataset_sources(node, origin, f.dotted())) {
            *target = std::move(*sources);
            return true;
          }
        } else {
          if (node.is_string()) {
            *target = *node.value<std::string>();
            return true;
          }
        }
        return false;
      },
      f.target);
  if (!ok) {
    throw ConfigError(fmt::format("{}: {} must be {} (got {})", origin, f.dotted(), type_name(f),
                                  toml::impl::node_type_friendly_names[int(node.type())]));
  }
}

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    // n continuation bytes follow the lead byte c; 4 marks a byte that cannot lead.
    const size_t n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : 4;
    if (n == 4 || text.size() - i <= n) return false;
    uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3f);
    }
    constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

void set_from_string(Field& f, const std::string& text) {
  auto fail = [&] {
    throw ConfigError(fmt::format("--{} must be {} (got '{}')", f.dotted(), type_name(f), text));
  };
  std::visit(
      [&](auto& target) {
        using T = std::remove_pointer_t<std::decay_t<decltype(target)>>;
        if constexpr (std::is_same_v<T, Choice>) {
          if (!set_choice(target, text)) fail();
        } else if constexpr (std::is_same_v<T, std::string>) {
          // As in a TOML file, which must be UTF-8: otherwise the resolved config (printed, hashed
          // by rendezvous, stored in checkpoints) would not read back as the same value.
          if (!is_utf8(text)) {
            std::string shown;
            for (unsigned char c : text) shown += c < 0x80 ? std::string(1, char(c)) : fmt::format("\\x{:02x}", c);
            throw ConfigError(fmt::format("--{} must be UTF-8 text (got '{}')", f.dotted(), shown));
          }
          *target = text;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text == "true" || text == "1") *target = true;
          else if (text == "false" || text == "0") *target = false;
          else fail();
        } else if constexpr (std::is_same_v<T, StringTable>) {
          // The override is written as in the file: '[["tok_embeddings", "layers.0"], ["layers.1"]]'.
          std::optional<StringTable> table;
          try {
            toml::table parsed = toml::parse("v = " + text);
            if (parsed.size() == 1 && parsed.get("v")) table = string_table(*parsed.get("v"));
          } catch (const toml::parse_error&) {
          }
          if (!table) fail();
          *target = std::move(*table);
        } else if constexpr (std::is_same_v<T, DatasetSources>) {
          // As in the file, inline: '[{path = "a.parquet", weight = 3}, {path = "b.jsonl"}]'.
          std::optional<DatasetSources> sources;
          toml::table parsed;
          try {
            parsed = toml::parse("v = " + text);
          } catch (const toml::parse_error&) {
            fail();
          }
          if (parsed.size() == 1 && parsed.get("v")) sources = dataset_sources(*parsed.get("v"), "--" + f.dotted(), f.dotted());
          if (!sources) fail();
          *target = std::move(*sources);
        } else {
          std::istringstream in(text);
          T value{};
          in >> value;
          if (text.empty() || in.fail() || !in.eof()) fail();
          *target = value;
        }
      },
      f.target);
}

void apply_toml(JobConfig& config, const toml::table& root, const std::string& origin) {
  auto fields = config_fields(config);
  for (const auto& [section_key, section_node] : root) {
    std::string section(section_key.str());
    if (!has_section(fields, section)) {
      throw ConfigError(fmt::format("{}: unknown section [{}]", origin, section));
    }
    const auto* table = section_node.as_table();
    if (!table) throw ConfigError(fmt::format("{}: [{}] must be a table", origin, section));
    for (const auto& [key, value] : *table) {
      Field* f = find_field(fields, section, std::string(key.str()));
      if (!f) {
        throw ConfigError(fmt::format("{}: unknown key {}.{}{}", origin, section, key.str(),
                                      did_you_mean(section + "." + std::string(key.str()))));
      }
      set_from_toml(*f, value, origin);
    }
  }
}

void apply_overrides(JobConfig& config, const std::vector<std::string>& words) {
  auto fields = config_fields(config);
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word.rfind("--", 0) != 0) {
      throw ConfigError(fmt::format("unexpected argument '{}' (overrides are --section.key value)", word));
    }
    std::string name = word.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto dot = name.find('.');
    if (dot == std::string::npos) throw ConfigError(fmt::format("unknown option --{}", name));
    std::string section = name.substr(0, dot), key = name.substr(dot + 1);
    Field* f = find_field(fields, section, key);
    bool negated = false;
    if (!f && key.rfind("no_", 0) == 0) {
      f = find_field(fields, section, key.substr(3));
      negated = f && std::holds_alternative<bool*>(f->target);
      if (!negated) f = nullptr;
    }
    if (!f) throw ConfigError(fmt::format("unknown key --{}{}", name, did_you_mean(name)));
    if (negated) {
      if (value) throw ConfigError(fmt::format("--{} takes no value", name));
      *std::get<bool*>(f->target) = false;
      continue;
    }
    if (!value) {
      bool next_is_value = i + 1 < words.size() && words[i + 1].rfind("--", 0) != 0;
      if (std::holds_alternative<bool*>(f->target) && !next_is_value) {
        *std::get<bool*>(f->target) = true;  // a bare boolean flag switches it on
        continue;
      }
      if (!next_is_value) throw ConfigError(fmt::format("--{} needs a value", name));
      value = words[++i];
    }
    set_from_string(*f, *value);
  }
}

// The messages quote the user's keys, values and words, which may hold control characters (a
// quoted TOML key "a\nb", an override word with a newline): escaped here, once, so that every
// ConfigError stays one line.
template <typename F>
auto with_one_line_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ConfigError& e) {
    constexpr std::string_view kPrefix = "config error: ";  // added again by ConfigError
    std::string_view what = e.what();
    if (what.substr(0, kPrefix.size()) == kPrefix) what.remove_prefix(kPrefix.size());
    std::string escaped = one_line(what);
    if (escaped == what) throw;
    throw ConfigError(escaped);
  }
}

}  // namespace

JobConfig parse_job_config(const std::string& toml_text, const std::string& origin,
                           const std::vector<std::string>& overrides) {
  return with_one_line_errors([&] {
  JobConfig config;
  toml::table root;
  try {
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("{}:{}:{}: {}", origin, e.source().begin.line,
                                  e.source().begin.column, e.description()));
  }
  apply_toml(config, root, origin);
  apply_overrides(config, overrides);
  check_config(config);
  return config;
  });
}

JobConfig load_job_config(const std::string& toml_path, const std::vector<std::string>& overrides) {
  if (toml_path.empty()) return parse_job_config("", "<defaults>", overrides);
  // A directory opens as an empty stream on Linux, which would parse as "no keys set"; a device or
  // a FIFO would never end.
  if (auto why = unreadable_input_reason(toml_path, kMaxConfigFileBytes)) {
    throw ConfigError(fmt::format("config file {} {}", toml_path, *why));
  }
  std::ifstream in(toml_path);
  if (!in) throw ConfigError(fmt::format("cannot read config file {}", toml_path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_job_config(text.str(), toml_path, overrides);
}

SelectiveAc selective_ac(const ActivationCheckpoint& ac) {
  const auto& option = ac.selective_ac_option;
  if (option == "op") return {true, 1};
  size_t used = 0;
  int64_t every = -1;
  try {
    every = std::stoll(option, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != option.size() || every < 0 || option.empty() || option[0] == '-' || option[0] == '+') {
    throw ConfigError(fmt::format("activation_checkpoint.selective_ac_option must be 'op' or an integer k >= 0 "
                                  "(every k-th block; 0 = every block), got '{}'", option));
  }
  return {false, std::max<int64_t>(every, 1)};
}

void validate(const JobConfig& c) {
  with_one_line_errors([&] { check_config(c); });
}


std::vector<std::string> section_differences(const JobConfig& other, const JobConfig& current,
                                             const std::string& section) {
  JobConfig a = other, b = current;
  auto fa = config_fields(a), fb = config_fields(b);
  std::vector<std::string> out;
  for (size_t i = 0; i < fa.size() && i < fb.size(); ++i) {
    if (fa[i].section != section) continue;
    auto was = one_line(value_text(fa[i])), now = one_line(value_text(fb[i]));
    if (was != now) out.push_back(fmt::format("{} = {} (this job: {})", fa[i].dotted(), was, now));
  }
  return out;
}

std::string to_toml(const JobConfig& config) {
  JobConfig copy = config;
  std::map<std::string, toml::table> sections;
  std::vector<std::string> order;
  for (const auto& f : config_fields(copy)) {
    if (!sections.count(f.section)) order.push_back(f.section);
    std::visit(
        [&](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Choice>) {
            sections[f.section].insert_or_assign(f.key, v.names.at(v.current()));
          } else if constexpr (std::is_same_v<std::decay_t<decltype(v)>, StringTable*> ||
                               std::is_same_v<std::decay_t<decltype(v)>, DatasetSources*>) {
            sections[f.section].insert_or_assign(f.key, to_toml_array(*v));
          } else {
            sections[f.section].insert_or_assign(f.key, *v);
          }
        },
        f.target);
  }
  // Only "basic" strings: toml++ would print "\nx" as '''<newline>x''' (TOML drops a newline
  // right after the opening quotes) or, without multi-line strings, as a literal '...' holding a raw
  // newline (not valid TOML): the value would not parse back (found by the config fuzzer).
  constexpr auto flags = toml::toml_formatter::default_flags &
                         ~(toml::format_flags::allow_multi_line_strings | toml::format_flags::allow_literal_strings);
  std::ostringstream out;
  for (const auto& s : order) out << "[" << s << "]\n" << toml::toml_formatter{sections[s], flags} << "\n\n";
  return out.str();
}

}  // namespace ctitan::config
