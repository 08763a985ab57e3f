// A user's own libtorch (README: `-DCMAKE_PREFIX_PATH=/path/to/libtorch`, no venv) configures and
// compiles exactly what the venv's build compiles. The only libtorch this machine can fetch is the
// PyPI wheel's, so the prefix given is the wheel's torch/ directory, which is laid out as a libtorch
// zip is (include/, lib/, share/cmake/Torch). What this proves: the prefix route finds libtorch
// without CTITAN_PYTHON and yields the same compile and link commands, line for line, as the
// route `make` takes; so a full build that way is this build. What it cannot prove: a libtorch of
// another version or a CPU-only one (none is reachable here).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "support/test_support.h"

namespace ctitan {
namespace {

using testing::run_program;
using testing::TempDir;

// NAME:TYPE=VALUE lines of a CMakeCache.txt.
std::map<std::string, std::string> read_cmake_cache(const std::string& build_dir) {
  std::map<std::string, std::string> cache;
  std::ifstream in(build_dir + "/CMakeCache.txt");
  std::string line;
  static const std::regex entry(R"(^([A-Za-z_0-9]+):[A-Z]+=(.*)$)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, entry)) cache[m[1]] = m[2];
  }
  return cache;
}

// Every command ninja would run for the product and the tests, with the build directory's own
// path and the venv's Python define (the one intended difference) taken out, one per line, sorted.
std::string build_commands(const std::string& ninja, const std::string& build_dir) {
  auto r = run_program(ninja, {"-C", build_dir, "-t", "commands", "ctitan", "ctitan_tests", "rpc_test_worker"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::vector<std::string> out;
  std::string line;
  static const std::regex python_define(R"(-DCTITAN_PYTHON=\\"[^ ]*\\" ?)");
  while (std::getline(lines, line)) {
    if (line.rfind("ninja: ", 0) == 0) continue;  // "Entering directory"
    for (size_t at; (at = line.find(build_dir)) != std::string::npos;) line.replace(at, build_dir.size(), "BUILD");
    out.push_back(std::regex_replace(line, python_define, ""));
  }
  std::sort(out.begin(), out.end());
  std::string joined;
  for (const auto& l : out) joined += l + "\n";
  return joined;
}

TEST(CliOwnLibtorch, PrefixCompilesTheSameCommandsAsTheVenvRoute) {
  auto cache = read_cmake_cache(CTITAN_BUILD_DIR);
  ASSERT_TRUE(cache.count("Torch_DIR")) << "no Torch_DIR in " << CTITAN_BUILD_DIR << "/CMakeCache.txt";
  if (cache["CMAKE_GENERATOR"] != "Ninja") {
    GTEST_SKIP() << "this build directory uses " << cache["CMAKE_GENERATOR"]
                 << ": listing its commands needs Ninja (make's new build directories use it)";
  }
  // share/cmake/Torch -> the libtorch root a user would name.
  const auto libtorch = std::filesystem::path(cache["Torch_DIR"]).parent_path().parent_path().parent_path();
  ASSERT_TRUE(std::filesystem::exists(libtorch / "include" / "torch")) << libtorch;

  TempDir dir;
  const std::string own = std::filesystem::canonical(dir.path()).string() + "/own";
  std::vector<std::string> args = {"-S", CTITAN_SOURCE_DIR, "-B", own, "-G", "Ninja", "-DCMAKE_PREFIX_PATH=" + libtorch.string()};
  // The same build options as this build (a sanitizer build's flags, say), so that only the
  // libtorch route differs. Arrow is named as such a build names it, without the venv's Python.
  for (const char* key : {"CMAKE_BUILD_TYPE", "CMAKE_CXX_COMPILER", "CMAKE_C_COMPILER", "CTITAN_SANITIZE",
                          "CMAKE_CXX_FLAGS", "CMAKE_CXX_FLAGS_RELEASE", "CMAKE_CXX_FLAGS_RELWITHDEBINFO",
                          "CTITAN_WITH_ARROW", "CTITAN_ARROW_ROOT"}) {
    if (cache.count(key)) args.push_back("-D" + std::string(key) + "=" + cache[key]);
  }
  auto r = run_program(CTITAN_CMAKE, args, /*timeout_s=*/300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_cmake_cache(own)["CTITAN_PYTHON"], "") << "the prefix route must not need the venv";

  const std::string ninja = cache["CMAKE_MAKE_PROGRAM"];
  const std::string venv_route = build_commands(ninja, std::filesystem::canonical(CTITAN_BUILD_DIR).string());
  const std::string prefix_route = build_commands(ninja, own);
  // Every target's compile and link commands: over 30 in unity batches (CTITAN_UNITY_BUILD), over
  // 200 without. Fewer would mean the listing missed the build, and the equality below proves nothing.
  EXPECT_GT(std::count(venv_route.begin(), venv_route.end(), '\n'), 30) << venv_route;
  EXPECT_EQ(prefix_route, venv_route);
}

}  // namespace
}  // namespace ctitan
