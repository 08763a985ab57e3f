// A 1 GiB Parquet file in 256 MiB row groups streams in flat memory: the reader holds a page (the
// unit Parquet compresses, read whole; about 1 MiB here) and a 1 MiB read buffer, never a row
// group's column (Arrow's default would read each whole).
#include <gtest/gtest.h>

#include <fstream>

#include "ctitan/data/parquet_documents.h"
#include "support/parquet_files.h"
#include "support/test_support.h"

namespace ctitan::data::parquet_large_file_test {
namespace {

// VmHWM, the process's peak resident set, in bytes.
int64_t process_peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// Writing 5 to clear_refs resets VmHWM to the current resident set (Linux >= 4.0).
bool reset_process_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return bool(clear);
}

TEST(ParquetLargeFile, AGibibyteInQuarterGibibyteRowGroupsStreamsInFlatMemory) {
  if (auto why = testing::parquet_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir dir;
  const auto path = dir.file("big.parquet");
  constexpr int64_t kRowBytes = 64 << 10, kRows = 16384;  // 1 GiB of text in 64 KiB rows
  // Uncompressed and without a dictionary, so the file on disk is the full 1 GiB.
  auto written = testing::write_parquet_files(
      nlohmann::json::array({{{"path", path}, {"big_bytes", kRows * kRowBytes}, {"row_bytes", kRowBytes},
                              {"row_group_size", 4096}, {"compression", "none"}, {"use_dictionary", false},
                              {"write_batch_size", 16}}}),
      dir.path());
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0]["num_row_groups"], 4);
  EXPECT_GE(std::filesystem::file_size(path), uintmax_t(kRows * kRowBytes));
  if (!reset_process_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs is not writable here: the peak cannot be reset";
  const int64_t before = process_peak_rss_bytes();
  int64_t rows = 0, bytes = 0;
  auto reader = open_parquet_documents(path, {});
  while (auto doc = reader->next()) {
    ++rows;
    bytes += int64_t(doc->size());
  }
  const int64_t grew = process_peak_rss_bytes() - before;
  EXPECT_EQ(rows, kRows);
  EXPECT_EQ(bytes, kRows * kRowBytes);
  // A page (pyarrow writes about 1 MiB), the 1 MiB read buffer, one document and Arrow's pools:
  // a few MiB. 64 MiB is a quarter of one row group's column, which a reader holding a row group
  // would exceed four times over, and far above the page-level reader's need.
  EXPECT_LT(grew, int64_t(64) << 20) << "peak RSS grew by " << (grew >> 20) << " MiB reading 1 GiB";
}

}  // namespace
}  // namespace ctitan::data::parquet_large_file_test
