// ctitan as a library: `cmake --install` the build, then configure and build examples/custom_loop
// against the installed package with find_package(ctitan), as another project would, and run it.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace ctitan {
namespace {

using testing::run_program;
using testing::TempDir;

TEST(CliInstall, ExampleBuildsAgainstTheInstalledPackageAndTrains) {
  TempDir dir;
  const std::string prefix = dir.file("prefix");
  auto r = run_program(CTITAN_CMAKE, {"--install", CTITAN_BUILD_DIR, "--prefix", prefix});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The package, headers and the precompiled header's absence: a consumer compiles headers as is.
  EXPECT_TRUE(std::filesystem::exists(prefix + "/lib/cmake/ctitan/ctitanConfig.cmake"));
  EXPECT_TRUE(std::filesystem::exists(prefix + "/include/ctitan/models/common/transformer.h"));
  EXPECT_TRUE(std::filesystem::exists(prefix + "/bin/ctitan"));

  const std::string build = dir.file("example_build");
  r = run_program(CTITAN_CMAKE, {"-S", std::string(CTITAN_SOURCE_DIR) + "/examples/custom_loop", "-B", build,
                                 "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PREFIX_PATH=" + prefix});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_program(CTITAN_CMAKE, {"--build", build, "-j", "1"}, /*timeout_s=*/900);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Two ranks under the installed launcher: FSDP, a few steps, checkpoints; a second run resumes.
  const std::string out = dir.file("run");
  auto run = [&](const std::string& steps) {
    return run_program(prefix + "/bin/ctitan", {"run", "--nproc-per-node", "2", "--master-port", "0", "--exec",
                                                build + "/custom_loop", out, steps}, 300);
  };
  r = run("6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("custom_loop: step 6 loss"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(out + "/checkpoint/step-6"));
  r = run("8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("custom_loop: resumed at step 6"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("custom_loop: step 8 loss"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("custom_loop: step 1 loss"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ctitan
