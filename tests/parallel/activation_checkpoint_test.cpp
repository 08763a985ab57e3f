// Activation checkpointing: the same losses and weights as without it, bitwise in fp32 (one
// process, FSDP and DDP), and a lower activation peak.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ctitan/common/error.h"
#include "ctitan/config/config_fields.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/parallel/activation_checkpoint.h"
#include "ctitan/train/trainer.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

using testing::TempDir;

config::JobConfig with_ac(const std::string& dir, config::ActivationCheckpointMode mode, const std::string& option) {
  auto config = testing::tiny_job_config(dir);
  config.activation_checkpoint.mode = mode;
  config.activation_checkpoint.selective_ac_option = option;
  config.model.n_layers = 4;  // selective k = 2 then wraps blocks 1 and 3, not all
  return config;
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> weights;
};

Trained train_steps(config::JobConfig config, int steps) {
  train::Trainer trainer(std::move(config));
  Trained out;
  for (int i = 0; i < steps; ++i) out.losses.push_back(trainer.train_step({trainer.dataloader().next()}).loss.item<double>());
  for (const auto& p : trainer.model().named_parameters()) out.weights[p.key()] = p.value().detach().clone();
  return out;
}

// Same ops in the same order on the same inputs: the recomputed activations equal the first
// run's bit for bit, so do the gradients, the updates and the next losses. Exact equality is
// the claim, not a tolerance.
TEST(ActivationCheckpoint, LossesAndWeightsEqualNoCheckpointingBitwise) {
  TempDir dir;
  const auto none = train_steps(with_ac(dir.file("none"), config::ActivationCheckpointMode::kNone, "2"), 4);
  for (auto [mode, option] : {std::pair{config::ActivationCheckpointMode::kFull, "2"},
                              std::pair{config::ActivationCheckpointMode::kSelective, "2"},
                              std::pair{config::ActivationCheckpointMode::kSelective, "0"}}) {
    SCOPED_TRACE(config::name_of(mode) + " " + option);
    const auto ac = train_steps(with_ac(dir.file(std::string("ac") + option), mode, option), 4);
    EXPECT_EQ(ac.losses, none.losses);
    for (const auto& [name, w] : none.weights) EXPECT_TRUE(torch::equal(ac.weights.at(name), w)) << name;
  }
}

// bf16 autocast: the recomputation runs under the autocast state of the first run, so it too
// matches bitwise (a recompute in fp32 would not).
TEST(ActivationCheckpoint, Bf16AutocastRecomputesInBf16) {
  TempDir dir;
  auto none_config = with_ac(dir.file("none"), config::ActivationCheckpointMode::kNone, "2");
  none_config.training.mixed_precision_param = torch::kBFloat16;
  auto full_config = with_ac(dir.file("full"), config::ActivationCheckpointMode::kFull, "2");
  full_config.training.mixed_precision_param = torch::kBFloat16;
  EXPECT_EQ(train_steps(full_config, 2).losses, train_steps(none_config, 2).losses);
}

// Peak live bytes of one forward + backward above what was live before it (the counting
// allocator): checkpointing every block keeps only the blocks' inputs.
int64_t step_peak_above_start(config::JobConfig config) {
  train::Trainer trainer(std::move(config));
  auto batch = trainer.dataloader().next();
  trainer.forward_backward({batch});  // first step: lazily allocated state settles
  trainer.optimizer().zero_grad();
  metrics::reset_peak_memory();
  const int64_t start = metrics::memory_stats().active_bytes;
  trainer.forward_backward({batch});
  return metrics::memory_stats().peak_bytes - start;
}

TEST(ActivationCheckpoint, FullCheckpointingLowersTheStepPeak) {
  TempDir dir;
  auto config = [&](config::ActivationCheckpointMode mode, const std::string& option) {
    auto c = with_ac(dir.file(option), mode, option);
    c.training.seq_len = 128;  // activations, not weights, dominate the step
    return c;
  };
  const int64_t none = step_peak_above_start(config(config::ActivationCheckpointMode::kNone, "none"));
  const int64_t every2 = step_peak_above_start(config(config::ActivationCheckpointMode::kSelective, "2"));
  const int64_t full = step_peak_above_start(config(config::ActivationCheckpointMode::kFull, "full"));
  std::cout << "step peak above start: none " << none << " B, selective 2 " << every2 << " B, full " << full << " B\n";
  EXPECT_LT(full, every2);
  EXPECT_LT(every2, none);
}

// checkpointed() itself: the forward runs twice per backward (once without grad, once to
// recompute), the input and weight gradients equal the plain call's bitwise, no grad mode or
// an input without grad runs it once and keeps nothing.
TEST(ActivationCheckpoint, CheckpointedRunsTheForwardAgainForExactGradients) {
  torch::manual_seed(3);
  auto weight = torch::randn({16, 16}, torch::requires_grad());
  int calls = 0;
  models::ModuleHooks::Forward forward = [&](const torch::Tensor& x) {
    ++calls;
    return torch::tanh(torch::matmul(x, weight)).pow(2) + x;  // (4, 16)
  };
  auto x0 = torch::randn({4, 16});
  auto x_plain = x0.clone().requires_grad_(true);
  forward(x_plain).sum().backward();
  auto plain_weight_grad = weight.grad().clone();
  weight.mutable_grad() = torch::Tensor();
  calls = 0;

  auto x_ckpt = x0.clone().requires_grad_(true);
  auto out = parallel::checkpointed(x_ckpt, forward);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(weight.grad().defined());
  out.sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(torch::equal(weight.grad(), plain_weight_grad));
  EXPECT_TRUE(torch::equal(x_ckpt.grad(), x_plain.grad()));

  calls = 0;
  {
    torch::NoGradGuard no_grad;
    parallel::checkpointed(x0, forward);
  }
  parallel::checkpointed(x0, forward);  // x0 needs no grad
  EXPECT_EQ(calls, 2);
}

// torchtitan's count: with k, the blocks whose 1-based index is a multiple of k.
TEST(ActivationCheckpoint, SelectiveWrapsEveryKthBlockAsTorchtitanCounts) {
  models::llama::ModelArgs args;
  args.dim = 32;
  args.n_layers = 6;
  args.n_heads = 2;
  args.vocab_size = 16;
  args.max_seq_len = 8;
  auto wrapped = [&](config::ActivationCheckpointMode mode, const std::string& option) {
    models::llama::Transformer model(args);
    return parallel::apply_activation_checkpointing(*model, {mode, option});
  };
  EXPECT_EQ(wrapped(config::ActivationCheckpointMode::kNone, "2"), 0);
  EXPECT_EQ(wrapped(config::ActivationCheckpointMode::kFull, "2"), 6);
  EXPECT_EQ(wrapped(config::ActivationCheckpointMode::kSelective, "2"), 3);  // blocks 1, 3, 5
  EXPECT_EQ(wrapped(config::ActivationCheckpointMode::kSelective, "4"), 1);  // block 3
  EXPECT_EQ(wrapped(config::ActivationCheckpointMode::kSelective, "0"), 6);
  EXPECT_EQ(wrapped(config::ActivationCheckpointMode::kSelective, "7"), 0);
}

TEST(ActivationCheckpoint, BadSelectiveOptionIsAConfigError) {
  TempDir dir;
  for (const char* option : {"op", "x", "-1", "2x", ""}) {
    auto config = with_ac(dir.file("bad"), config::ActivationCheckpointMode::kSelective, option);
    try {
      train::Trainer trainer(config);
      ADD_FAILURE() << option << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("activation_checkpoint.selective_ac_option"), std::string::npos) << e.what();
    }
  }
}

// Under FSDP (2 ranks, the block re-gathered for its backward as without checkpointing, the
// recomputation on those gathered parameters) and DDP: the losses of every step equal the
// run without checkpointing, bitwise.
TEST(CliActivationCheckpoint, FsdpAndDdpLossesEqualNoCheckpointingBitwise) {
  // FSDP(2); DDP(2); FSDP(2) with 2 microbatches and delayed gradient sync (the recomputation's
  // nested backward runs with sync off for the first microbatch).
  const std::vector<std::vector<std::string>> layouts = {
      {"--parallelism.data_parallel_shard_degree", "2"},
      {"--parallelism.data_parallel_shard_degree", "1", "--parallelism.data_parallel_replicate_degree", "2"},
      {"--parallelism.data_parallel_shard_degree", "2", "--training.global_batch_size", "16",
       "--parallelism.fsdp_gradient_sync", "last_microbatch"}};
  for (const auto& layout : layouts) {
    SCOPED_TRACE(layout.at(1) + " " + (layout.size() > 2 ? layout.at(2) : ""));
    std::vector<std::vector<double>> losses;
    for (const char* mode : {"none", "full"}) {
      TempDir dir;
      auto r = testing::run_ctitan(
          testing::concat(testing::concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                          testing::tiny_job_args(dir.path())),
                          testing::concat({"--training.steps", "4", "--metrics.log_freq", "1",
                                           "--activation_checkpoint.mode", mode},
                                          layout)),
          240);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      if (mode == std::string("full")) {
        EXPECT_NE(r.output.find("activation checkpointing full: 2 of 2 blocks"), std::string::npos) << r.output;
      }
      losses.emplace_back();
      for (const auto& row : testing::read_jsonl(dir.file("metrics.jsonl"))) {
        if (row.contains("loss")) losses.back().push_back(row["loss"].get<double>());
      }
      ASSERT_EQ(losses.back().size(), 4u);
    }
    EXPECT_EQ(losses[1], losses[0]);
  }
}

}  // namespace
}  // namespace ctitan
