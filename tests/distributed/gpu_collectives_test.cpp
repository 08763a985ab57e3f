// A one-rank NCCL group on the GPU (tests/support/gpu.h: skipped without one): the only NCCL a
// one-GPU machine can run. Two processes cannot share a GPU under NCCL, so multi-rank NCCL stays
// untested here (docs/GPU.md).
#include <gtest/gtest.h>

#include <thread>

#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/rank_device.h"
#include "ctitan/distributed/stream_watchdog.h"
#include "support/gpu.h"
#include "support/thread_ranks.h"

namespace ctitan::distributed {
namespace {

// Every collective the trainer uses goes through NCCL (the tensors are on the GPU and the process
// computes there), completes on the stream, and gives what one rank's collective gives: its input.
TEST(GpuCollectives, AOneRankNcclGroupRunsEveryCollective) {
  CTITAN_SKIP_WITHOUT_CUDA();
  const auto device = use_rank_device(config::DeviceChoice::kCuda, 0);
  auto group = Communicator::create(ctitan::testing::in_memory_store(), "gpu", 0, 1, std::chrono::seconds(60));
  const auto options = torch::TensorOptions(torch::kFloat).device(device);
  auto x = torch::arange(1024, options);
  auto expected = x.clone();
  group->all_reduce(x, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(x, expected));
  group->all_reduce(x, ReduceOp::kAvg);
  EXPECT_TRUE(torch::equal(x, expected));
  auto gathered = torch::empty({1024}, options);
  group->all_gather_into_tensor(gathered, x);
  EXPECT_TRUE(torch::equal(gathered, expected));
  auto scattered = torch::empty({1024}, options);
  group->reduce_scatter_tensor(scattered, x, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(scattered, expected));
  auto bf16 = x.to(torch::kBFloat16);
  group->all_reduce(bf16, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(bf16, expected.to(torch::kBFloat16)));
  // Asynchronous: the buffers are held until wait(), and the watchdog lets go once done.
  auto work = group->all_reduce(x, ReduceOp::kSum, /*async_op=*/true);
  work->wait();
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(x, expected));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (stream_watchdog().watched() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(stream_watchdog().watched(), 0u);
  EXPECT_GT(group->stats().at("all_reduce").calls, 0);
}

}  // namespace
}  // namespace ctitan::distributed
