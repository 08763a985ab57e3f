// The trainer knows no parallelism: it holds one ParallelizedModel (parallel/parallelized_model.h)
// and asks it the same things in every layout. This walks train/ for anything that would let a
// branch on the layout back in: a parallelism's own header, or a question about the degrees.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace {

TEST(TrainerLayoutFree, TrainNamesNoParallelismButParallelizedModel) {
  namespace fs = std::filesystem;
  const fs::path train = fs::path(CTITAN_SOURCE_DIR) / "src" / "ctitan" / "train";
  ASSERT_TRUE(fs::is_directory(train));
  const std::regex forbidden(
      R"re(#include "ctitan/parallel/(?!parallelized_model\.h)|(fsdp|ddp|tp|pp|dp|cp|ep)_enabled\(\)|)re"
      R"re(dims\.(tp|pp|cp|ep|dp_shard|dp_replicate)\b|local_rank\("(tp|pp|cp|ep|dp_shard|dp_replicate)"\)|)re"
      R"re(tensor_parallel_degree|pipeline_parallel_degree|data_parallel_(shard|replicate)_degree)re");
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(train)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const auto content = text.str();
    std::smatch match;
    EXPECT_FALSE(std::regex_search(content, match, forbidden))
        << "src/ctitan/train/" << entry.path().filename().string() << " asks about the layout: " << match.str();
    ++checked;
  }
  EXPECT_GE(checked, 4);  // the walk saw trainer.h, trainer.cpp and their neighbours
}

}  // namespace
