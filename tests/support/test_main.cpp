// The test programs' main: GoogleTest's, plus an exit code for "skipped" that ctest understands.
// ctest runs one GoogleTest suite per entry (cmake/DiscoverTestSuites.cmake) and sets
// CTITAN_TEST_SKIP_EXIT_CODE: an entry in which a test skipped and none failed exits with it, so
// ctest reports the entry as skipped rather than passed (a skip is never counted as a pass), and
// a failure is never hidden behind a skip message. Run by hand, the exit code is GoogleTest's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  if (failed != 0) return failed;
  const char* skip_code = std::getenv("CTITAN_TEST_SKIP_EXIT_CODE");
  if (skip_code && *skip_code && ::testing::UnitTest::GetInstance()->skipped_test_count() > 0) {
    return std::atoi(skip_code);
  }
  return 0;
}
