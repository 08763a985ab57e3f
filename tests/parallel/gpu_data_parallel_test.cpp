// FSDP and DDP over a one-rank NCCL group on the GPU against the plain model on the same GPU
// (tests/support/gpu.h: skipped without one). One rank gathers and reduces to the identity, so
// the only differences left are the kernels' own: cuBLAS may pick another algorithm for a weight
// that is a view into FSDP's flat buffer (alignment), and CUDA backward kernels may accumulate
// with atomics in another order. Both are fp32 rounding, ~1e-7 of the values; 1e-6 of the largest
// entry bounds them. A wrong stream order (a gather read before it landed, a gradient reduced
// before backward wrote it) or a CUDA storage resize that lost data is off by O(1) of it.
#include <gtest/gtest.h>

#include <map>

#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/rank_device.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/parallel/ddp.h"
#include "ctitan/parallel/fsdp_plan.h"
#include "support/gpu.h"
#include "support/thread_ranks.h"

namespace ctitan::parallel {
namespace {

models::ModelArgs gpu_tiny_args() {
  models::ModelArgs args;
  args.dim = 128;
  args.n_layers = 3;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 2048;
  args.multiple_of = 32;
  args.max_seq_len = 16;
  return args;
}

models::Transformer seeded_model_on(torch::Device device) {
  torch::manual_seed(3);
  models::Transformer model(gpu_tiny_args());
  models::init_weights(*model);
  model->to(device);
  return model;
}

torch::Tensor tiny_loss(models::TransformerImpl& model, torch::Device device) {
  auto tokens = torch::arange(16, torch::kLong).mul(97).remainder(2048).reshape({2, 8}).to(device);
  return model.forward(tokens).pow(2).mean();
}

std::map<std::string, torch::Tensor> plain_grads(torch::Device device, double* loss) {
  auto model = seeded_model_on(device);
  auto l = tiny_loss(*model, device);
  l.backward();
  *loss = l.item<double>();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

void expect_close(const torch::Tensor& got, const torch::Tensor& expected, const std::string& name) {
  const double scale = expected.abs().max().item<double>();
  EXPECT_LE((got - expected).abs().max().item<double>(), 1e-6 * scale + 1e-12) << name;
}

std::shared_ptr<distributed::Communicator> one_rank_nccl_group(const std::string& name) {
  distributed::use_rank_device(config::DeviceChoice::kCuda, 0);
  return distributed::Communicator::create(ctitan::testing::in_memory_store(), name, 0, 1, std::chrono::seconds(60));
}

TEST(GpuDataParallel, FsdpOverOneNcclRankEqualsThePlainModel) {
  CTITAN_SKIP_WITHOUT_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  double expected_loss = 0;
  const auto expected = plain_grads(gpu, &expected_loss);
  auto group = one_rank_nccl_group("fsdp");
  auto model = seeded_model_on(gpu);
  auto fsdp = apply_fsdp(*model, models::decoder_plan(model->args()).fsdp_units, {group, nullptr}, {},
                         config::ReshardAfterForward::kDefault);
  auto loss = tiny_loss(*model, gpu);
  loss.backward();
  EXPECT_NEAR(loss.item<double>(), expected_loss, 1e-6 * std::abs(expected_loss));
  const auto shards = fsdp->parameters_to_optimize();
  ASSERT_EQ(shards.size(), expected.size());
  for (const auto& [name, shard] : shards) {
    ASSERT_TRUE(expected.count(name)) << name;
    ASSERT_TRUE(shard.grad().defined()) << name;
    EXPECT_TRUE(shard.is_cuda()) << name;
    expect_close(shard.grad().view(expected.at(name).sizes()), expected.at(name), name);
  }
}

TEST(GpuDataParallel, DdpOverOneNcclRankEqualsThePlainModel) {
  CTITAN_SKIP_WITHOUT_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  double expected_loss = 0;
  const auto expected = plain_grads(gpu, &expected_loss);
  auto group = one_rank_nccl_group("ddp");
  auto model = seeded_model_on(gpu);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
  DistributedDataParallel ddp(named, group, /*bucket_cap_mb=*/0.25);  // several buckets
  auto loss = tiny_loss(*model, gpu);
  loss.backward();
  EXPECT_NEAR(loss.item<double>(), expected_loss, 1e-6 * std::abs(expected_loss));
  for (const auto& [name, param] : ddp.parameters_to_optimize()) {
    ASSERT_TRUE(param.grad().defined()) << name;
    expect_close(param.grad(), expected.at(name), name);
  }
}

}  // namespace
}  // namespace ctitan::parallel
