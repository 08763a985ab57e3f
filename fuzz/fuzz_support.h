#pragma once
// Shared by the fuzz targets: a private scratch directory per fuzzing process, a file written
// there from the fuzzer's bytes, and the one rule every target checks. A parser of untrusted input
// may only throw ctitan's documented errors (common/error.h): InputError (and its ConfigError) or
// IoError. Any other exception escapes LLVMFuzzerTestOneInput, and libFuzzer reports the abort as
// a crash, as it does ASan/UBSan reports, leaks, timeouts and out-of-memory.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "ctitan/common/error.h"

namespace ctitan::fuzz {

// $TMPDIR/ctitan-fuzz-XXXXXX, made once per process and removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ctitan-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
inline std::filesystem::path write_file(const std::string& name, std::string_view bytes) {
  auto path = scratch_dir() / name;
  std::filesystem::create_directories(path.parent_path());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `parse`, accepting only ctitan's documented errors, whose message must be one line and,
// when `names` is not empty, name it (the file at fault).
template <typename F>
void expect_ctitan_errors_only(F&& parse, const std::string& names = "") {
  auto check_one_line = [&](const char* what) {
    std::string_view message(what);
    if (message.empty() || message.find('\n') != std::string_view::npos) {
      std::fprintf(stderr, "error message is not one line: [%s]\n", what);
      std::abort();
    }
    if (!names.empty() && message.find(names) == std::string_view::npos) {
      std::fprintf(stderr, "error message does not name %s: [%s]\n", names.c_str(), what);
      std::abort();
    }
  };
  try {
    parse();
  } catch (const ctitan::InputError& e) {
    check_one_line(e.what());
  } catch (const ctitan::IoError& e) {
    check_one_line(e.what());
  }
}

}  // namespace ctitan::fuzz
