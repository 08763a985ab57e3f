// `ctitan generate` straight from a checkpoint step directory written by sharded (FSDP) ranks:
// the shards are gathered by name and the model shape comes from the config in the metadata.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

using testing::concat;

// The tiny job's data cycles through 0..15, so a model that learned it continues any run of the
// cycle: after 3,4,5,6 greedy decoding must give 7,8,...,15,0,1,... The job reaches a loss of
// ~0.007 in 60 steps, far below what an off-by-one or a mis-assembled shard would allow.
TEST(CliGenerate, FsdpCheckpointContinuesThePlantedCycle) {
  testing::TempDir dir;
  auto train = testing::run_ctitan(concat(
      concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"}, testing::tiny_job_args(dir.path())),
      {"--parallelism.data_parallel_shard_degree", "2", "--training.local_batch_size", "2", "--checkpoint.enable",
       "true", "--checkpoint.interval", "60"}), 240);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  auto gen = testing::run_ctitan({"generate", "--checkpoint", (dir.path() / "checkpoint" / "step-60").string(),
                                  "--prompt-ids", "3,4,5,6", "--max-new-tokens", "20", "--temperature", "0", "--json"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  auto json_start = gen.output.rfind("{\"ids\"");
  ASSERT_NE(json_start, std::string::npos) << gen.output;
  auto ids = nlohmann::json::parse(gen.output.substr(json_start))["ids"].get<std::vector<int>>();
  ASSERT_EQ(ids.size(), 20u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], int(7 + i) % 16) << "token " << i;
}

}  // namespace
}  // namespace ctitan
