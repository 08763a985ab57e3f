// A job config: TOML text plus command-line override words, as `ctitan train --config X.toml
// --section.key value ...` passes them. The input is the TOML text, then a NUL byte, then the
// override words separated by NUL bytes. An accepted config must print as TOML that parses again
// to the same text (rendezvous hashes it; checkpoints store it).
#include <string>
#include <vector>

#include "ctitan/config/config_manager.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input = ctitan::fuzz::as_text(data, size);
  auto nul = input.find('\0');
  std::string toml(input.substr(0, nul));
  std::vector<std::string> overrides;
  if (nul != std::string_view::npos) {
    std::string_view rest = input.substr(nul + 1);
    while (true) {
      auto end = rest.find('\0');
      overrides.emplace_back(rest.substr(0, end));
      if (end == std::string_view::npos) break;
      rest = rest.substr(end + 1);
    }
  }
  const std::string origin = "fuzz.toml";
  ctitan::fuzz::expect_ctitan_errors_only(
      [&] {
        auto config = ctitan::config::parse_job_config(toml, origin, overrides);
        const std::string printed = ctitan::config::to_toml(config);
        std::string reprinted;
        try {
          reprinted = ctitan::config::to_toml(ctitan::config::parse_job_config(printed, "printed config"));
        } catch (const std::exception& e) {
          std::fprintf(stderr, "the printed config does not parse again: %s\n%s\n", e.what(), printed.c_str());
          std::abort();
        }
        if (reprinted != printed) {
          std::fprintf(stderr, "to_toml does not round-trip:\n%s\n---\n%s\n", printed.c_str(), reprinted.c_str());
          std::abort();
        }
      });
  return 0;
}
