// A single process is a world of one: init_distributed gives it the same context as a job of N
// ranks, with groups of one rank that have no transport and whose collectives are identities.
#include <gtest/gtest.h>

#include "ctitan/common/error.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/init_distributed.h"
#include "support/thread_ranks.h"

namespace ctitan::distributed {
namespace {

config::JobConfig config_with(std::vector<std::string> overrides) {
  return config::load_job_config("", overrides);
}

TEST(WorldOfOne, HasEveryGroupTheTrainerAsksForWithoutATransport) {
  auto ctx = init_distributed(config_with({}), DistEnv{});
  EXPECT_EQ(ctx->env.world_size, 1);
  EXPECT_EQ(ctx->dims.dp(), 1);
  EXPECT_FALSE(ctx->dims.pp_enabled());
  ASSERT_TRUE(ctx->world);
  EXPECT_EQ(ctx->world->size(), 1);
  for (const auto* name : {"dp", "dp_shard"}) {
    auto group = ctx->mesh->group(name);
    EXPECT_EQ(group->size(), 1) << name;
    EXPECT_EQ(group->rank(), 0) << name;
    EXPECT_THROW(group->gloo_backend(), std::logic_error) << name << " should have no transport";
  }
  EXPECT_EQ(ctx->loss_group(), ctx->mesh->group("dp"));
  // The store is in-process: a key set here is there, with no server behind it.
  ctx->store->set("k", std::vector<uint8_t>{1, 2});
  EXPECT_EQ(ctx->store->get("k"), (std::vector<uint8_t>{1, 2}));
}

TEST(WorldOfOne, CollectivesAreExactIdentities) {
  auto ctx = init_distributed(config_with({}), DistEnv{});
  auto& world = *ctx->world;
  auto t = torch::tensor({1.5f, -2.0f, 3.25f});
  const auto original = t.clone();
  world.all_reduce(t, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(t, original));
  world.all_reduce(t, ReduceOp::kAvg);
  EXPECT_TRUE(torch::equal(t, original));
  world.broadcast(t, 0);
  EXPECT_TRUE(torch::equal(t, original));
  world.barrier();
  auto gathered = torch::zeros({3});
  world.all_gather_into_tensor(gathered, t);
  EXPECT_TRUE(torch::equal(gathered, original));
  auto scattered = torch::zeros({3});
  world.reduce_scatter_tensor(scattered, t, ReduceOp::kAvg);
  EXPECT_TRUE(torch::equal(scattered, original));
  // Still numbered and counted like any collective, so labels and stats read the same.
  EXPECT_EQ(world.sequence_number(), 6);
  EXPECT_EQ(world.stats().at("all_gather").calls, 1);
}

// One process asking for more ranks is the same one-line error as before the world of one.
TEST(WorldOfOne, RefusesDegreesThatNeedMoreRanks) {
  EXPECT_THROW(init_distributed(config_with({"--parallelism.tensor_parallel_degree", "2"}), DistEnv{}), ConfigError);
}

// A group of one created with create() keeps its transport: GPU tests run NCCL on one GPU that way.
TEST(WorldOfOne, CreateOfOneRankStillHasItsTransport) {
  auto group = Communicator::create(ctitan::testing::in_memory_store(), "one", 0, 1, std::chrono::seconds(60),
                                    "127.0.0.1");
  EXPECT_TRUE(group->gloo_backend());
}

}  // namespace
}  // namespace ctitan::distributed
