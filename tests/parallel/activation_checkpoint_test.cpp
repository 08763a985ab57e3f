// Activation checkpointing, full, every k-th block and operator-level selective ("op"): the same
// losses and weights as without it, bitwise in fp32 (one process, FSDP, DDP, TP), and fewer saved
// bytes and a lower activation peak.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "ctitan/common/error.h"
#include "ctitan/config/config_fields.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/models/common/parallelize_plan.h"
#include "ctitan/parallel/activation_checkpoint.h"
#include "ctitan/parallel/op_selective_checkpoint.h"
#include "ctitan/parallel/tp/tensor_parallel.h"
#include "ctitan/train/trainer.h"
#include "support/parity.h"
#include "support/test_support.h"
#include "support/thread_ranks.h"
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
                              std::pair{config::ActivationCheckpointMode::kSelective, "0"},
                              std::pair{config::ActivationCheckpointMode::kSelective, "op"}}) {
    SCOPED_TRACE(config::name_of(mode) + " " + option);
    const auto ac = train_steps(with_ac(dir.file(std::string("ac") + option), mode, option), 4);
    EXPECT_EQ(ac.losses, none.losses);
    for (const auto& [name, w] : none.weights) EXPECT_TRUE(torch::equal(ac.weights.at(name), w)) << name;
  }
}

// bf16 autocast: the recomputation runs under the autocast state of the first run, so it too
// matches bitwise (a recompute in fp32 would not). Op SAC's kept matmul outputs are the first
// run's bf16 ones.
TEST(ActivationCheckpoint, Bf16AutocastRecomputesInBf16) {
  TempDir dir;
  auto none_config = with_ac(dir.file("none"), config::ActivationCheckpointMode::kNone, "2");
  none_config.training.mixed_precision_param = torch::kBFloat16;
  auto full_config = with_ac(dir.file("full"), config::ActivationCheckpointMode::kFull, "2");
  full_config.training.mixed_precision_param = torch::kBFloat16;
  auto op_config = with_ac(dir.file("op"), config::ActivationCheckpointMode::kSelective, "op");
  op_config.training.mixed_precision_param = torch::kBFloat16;
  const auto none = train_steps(none_config, 2).losses;
  EXPECT_EQ(train_steps(full_config, 2).losses, none);
  EXPECT_EQ(train_steps(op_config, 2).losses, none);
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
  const int64_t op = step_peak_above_start(config(config::ActivationCheckpointMode::kSelective, "op"));
  std::cout << "step peak above start: none " << none << " B, selective 2 " << every2 << " B, op " << op
            << " B, full " << full << " B\n";
  EXPECT_LT(full, every2);
  EXPECT_LT(every2, none);
  // Op SAC keeps more than full AC (matmul and attention outputs) and less than none (no norm,
  // RoPE or SwiGLU activations, half the matmul outputs).
  EXPECT_LT(full, op);
  EXPECT_LT(op, none);
}

// The bytes the blocks keep for backward: live bytes when the last block has returned (a pre-hook
// on the final norm reads the counting allocator) above those before the forward. Everything else
// live then (the embedding output, the last block's output) is the same in every mode.
int64_t bytes_kept_by_blocks(config::ActivationCheckpointMode mode, const std::string& option) {
  metrics::install_memory_tracker();
  models::ModelArgs args;
  args.dim = 64;
  args.n_layers = 4;
  args.n_heads = 4;
  args.vocab_size = 32;
  args.max_seq_len = 128;
  torch::manual_seed(0);
  models::Transformer model(args);
  models::init_weights(*model);
  parallel::apply_activation_checkpointing(*model, models::decoder_plan(args).checkpoint_units, {mode, option});
  auto tokens = torch::randint(args.vocab_size, {4, 128}, torch::kLong);  // (B, T)
  int64_t after_blocks = 0;
  model->hooks.add_pre_forward(*model->norm, [&](const torch::Tensor& h) {
    after_blocks = metrics::memory_stats().active_bytes;
    return h;
  });
  const int64_t start = metrics::memory_stats().active_bytes;
  auto loss = model->forward(tokens).pow(2).mean();
  loss.backward();  // the recorded graph is complete and runs
  return after_blocks - start;
}

// Op SAC keeps, per block, the input, every other matmul output (wq, wv, w1 or w3, w2) and attention's
// output and logsumexp; none keeps every op's inputs; full only the input. The relation holds on
// any machine: the bytes are the tensors' sizes, not timings. The ratio is printed for the docs.
TEST(ActivationCheckpoint, OpSelectiveKeepsFewerBytesThanNoneAndMoreThanFull) {
  const int64_t none = bytes_kept_by_blocks(config::ActivationCheckpointMode::kNone, "2");
  const int64_t op = bytes_kept_by_blocks(config::ActivationCheckpointMode::kSelective, "op");
  const int64_t full = bytes_kept_by_blocks(config::ActivationCheckpointMode::kFull, "2");
  std::cout << "bytes kept by 4 blocks (B 4, T 128, dim 64): none " << none << ", op " << op << ", full " << full
            << "; op/none " << double(op) / double(none) << ", full/none " << double(full) / double(none) << "\n";
  EXPECT_LT(op, none);
  EXPECT_GT(op, full);
  EXPECT_GT(full, 0);
}

// op_selective_checkpointed() itself on linear -> linear -> attention -> linear: the first run
// keeps matmuls 1 and 3 and the attention (matmul 2 is the recomputed every-other one), the
// recompute takes all three back, and the gradients equal the plain call's bitwise.
TEST(ActivationCheckpoint, OpSelectiveKeepsMatmulsAndAttentionAndGradientsAreExact) {
  torch::manual_seed(5);
  auto w1 = torch::randn({16, 16}, torch::requires_grad());
  auto w2 = torch::randn({16, 16}, torch::requires_grad());
  auto w3 = torch::randn({16, 16}, torch::requires_grad());
  int calls = 0;
  models::ModuleHooks::Forward forward = [&](const torch::Tensor& x) {  // x: (B 2, T 8, 16)
    ++calls;
    auto h = torch::nn::functional::linear(torch::relu(x), w1);
    auto v = torch::nn::functional::linear(h, w2).view({2, 8, 2, 8}).transpose(1, 2);  // (B, heads 2, T, 8)
    auto q = h.view({2, 8, 2, 8}).transpose(1, 2);
    auto a = at::scaled_dot_product_attention(q, q, v, {}, 0.0, /*is_causal=*/true).transpose(1, 2).reshape({2, 8, 16});
    return torch::nn::functional::linear(a, w3) + x;
  };
  auto x0 = torch::randn({2, 8, 16});
  auto x_plain = x0.clone().requires_grad_(true);
  forward(x_plain).pow(2).sum().backward();
  std::vector<torch::Tensor> plain = {x_plain.grad(), w1.grad().clone(), w2.grad().clone(), w3.grad().clone()};
  for (auto* w : {&w1, &w2, &w3}) w->mutable_grad() = torch::Tensor();

  auto x_sac = x0.clone().requires_grad_(true);
  const auto before = parallel::op_sac_counts();
  auto out = parallel::op_selective_checkpointed(x_sac, forward);
  auto after_forward = parallel::op_sac_counts();
  EXPECT_EQ(after_forward.saved - before.saved, 3);  // matmuls 1, 3 and the attention kernel
  EXPECT_EQ(after_forward.recomputed - before.recomputed, 1);  // matmul 2
  EXPECT_EQ(after_forward.replayed, before.replayed);
  out.pow(2).sum().backward();
  auto after_backward = parallel::op_sac_counts();
  EXPECT_EQ(after_backward.replayed - before.replayed, 3);
  EXPECT_EQ(after_backward.recomputed - before.recomputed, 2);
  EXPECT_EQ(after_backward.saved, after_forward.saved);  // backward's own matmuls are not intercepted
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(torch::equal(x_sac.grad(), plain[0]));
  EXPECT_TRUE(torch::equal(w1.grad(), plain[1]));
  EXPECT_TRUE(torch::equal(w2.grad(), plain[2]));
  EXPECT_TRUE(torch::equal(w3.grad(), plain[3]));

  // saved_op, the seam for ops the dispatcher does not see: plain outside a block.
  int computed = 0;
  auto y = parallel::saved_op("test::op", [&] {
    ++computed;
    return torch::ones({2});
  });
  EXPECT_EQ(computed, 1);
  EXPECT_TRUE(torch::equal(y, torch::ones({2})));
}

// TP(2) on 2 thread ranks: per block the first forward keeps 4 matmul outputs, the attention
// kernel's and both reduce-scatters' (7 ops), and the recompute takes all 7 back on each rank;
// every gradient equals the TP model without checkpointing, bitwise.
TEST(ActivationCheckpoint, OpSelectiveUnderTensorParallelKeepsTheReduceScatters) {
  models::ModelArgs args;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.vocab_size = 16;
  args.max_seq_len = 16;
  auto store = testing::in_memory_store();
  std::mutex build;  // model construction draws from the global generator
  auto errors = testing::on_thread_ranks(2, [&](int rank) {
    auto group = std::shared_ptr<distributed::Communicator>(
        distributed::Communicator::create(store, "tp", rank, 2, std::chrono::seconds(60), "127.0.0.1"));
    auto grads = [&](bool op) {
      models::Transformer model{nullptr};
      {
        std::lock_guard<std::mutex> lock(build);
        torch::manual_seed(3);
        model = models::Transformer(args);
        models::init_weights(*model);
      }
      parallel::tp::TensorParallel tp(*model, group, /*loss_parallel=*/true);
      if (op)
        parallel::apply_activation_checkpointing(*model, models::decoder_plan(args).checkpoint_units,
                                                 {config::ActivationCheckpointMode::kSelective, "op"});
      auto tokens = torch::arange(32, torch::kLong).remainder(16).view({2, 16});  // (B, T), the same on both ranks
      const auto before = parallel::op_sac_counts();
      auto loss = tp.vocab_parallel_cross_entropy_sum(model->forward(tokens), tokens, -100);
      const auto after_forward = parallel::op_sac_counts();
      loss.backward();
      const auto after_backward = parallel::op_sac_counts();
      const int64_t per_model = op ? 7 * args.n_layers : 0;
      if (after_forward.saved - before.saved != per_model || after_backward.replayed - before.replayed != per_model) {
        throw std::runtime_error(fmt::format("kept {} and took back {} ops, expected {}", after_forward.saved - before.saved,
                                             after_backward.replayed - before.replayed, per_model));
      }
      std::vector<torch::Tensor> out;
      for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
      return out;
    };
    auto none = grads(false), op = grads(true);
    for (size_t i = 0; i < none.size(); ++i) {
      if (!torch::equal(op[i], none[i])) throw std::runtime_error("gradient " + std::to_string(i) + " differs");
    }
  });
  EXPECT_EQ(testing::rank_errors(errors), "");
}

// A recompute that does not call the ops the first forward called is an error, not a silent
// mismatch.
TEST(ActivationCheckpoint, OpSelectiveRefusesADivergentRecompute) {
  auto w = torch::randn({8, 8}, torch::requires_grad());
  int calls = 0;
  models::ModuleHooks::Forward forward = [&](const torch::Tensor& x) {
    ++calls;
    auto h = torch::nn::functional::linear(x, w);
    return calls == 1 ? h * 2 : torch::nn::functional::linear(h, w) + torch::nn::functional::linear(h, w);
  };
  auto out = parallel::op_selective_checkpointed(torch::randn({4, 8}, torch::requires_grad()), forward);
  try {
    out.sum().backward();
    ADD_FAILURE() << "a divergent recompute was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("op selective AC"), std::string::npos) << e.what();
  }
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
  models::ModelArgs args;
  args.dim = 32;
  args.n_layers = 6;
  args.n_heads = 2;
  args.vocab_size = 16;
  args.max_seq_len = 8;
  auto wrapped = [&](config::ActivationCheckpointMode mode, const std::string& option) {
    models::Transformer model(args);
    return parallel::apply_activation_checkpointing(*model, models::decoder_plan(args).checkpoint_units, {mode, option});
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
  for (const char* option : {"x", "-1", "2x", "", "OP"}) {
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
    for (const char* mode : {"none", "full", "op"}) {
      TempDir dir;
      const std::vector<std::string> ac = mode == std::string("op")
          ? std::vector<std::string>{"--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option", "op"}
          : std::vector<std::string>{"--activation_checkpoint.mode", mode};
      auto r = testing::run_ctitan(
          testing::concat(testing::concat({"run", "--nproc-per-node", "2", "--master-port", "0", "train"},
                                          testing::tiny_job_args(dir.path())),
                          testing::concat(testing::concat({"--training.steps", "4", "--metrics.log_freq", "1"}, ac),
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
    EXPECT_EQ(losses[1], losses[0]) << "full";
    EXPECT_EQ(losses[2], losses[0]) << "op";
  }
}

// TP(2) and FSDP(2)xTP(2): op SAC takes the kept reduce-scatter outputs back on every tp rank
// and runs the all-gathers again, in the same order on each; the kept outputs and the recomputed
// ops are bit-equal to the first forward's, so losses and gradient norms equal the same layout
// without checkpointing bitwise.
TEST(CliActivationCheckpoint, TensorParallelOpSelectiveLossesEqualNoCheckpointingBitwise) {
  for (auto [nproc, layout] : {std::pair{2, testing::degrees(1, 1, 2)}, std::pair{4, testing::degrees(1, 2, 2)}}) {
    SCOPED_TRACE(nproc);
    auto base = testing::concat(layout, {"--training.local_batch_size", "2", "--training.steps", "4",
                                         "--metrics.log_freq", "1"});
    auto none = testing::run_tiny_job(nproc, base);
    auto op = testing::run_tiny_job(nproc, testing::concat(base, {"--activation_checkpoint.mode", "selective",
                                                                  "--activation_checkpoint.selective_ac_option", "op"}));
    ASSERT_EQ(none.size(), 4u);
    ASSERT_EQ(op.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(op[i]["loss"], none[i]["loss"]) << "step " << i + 1;
      EXPECT_EQ(op[i]["grad_norm"], none[i]["grad_norm"]) << "step " << i + 1;
    }
  }
}

}  // namespace
}  // namespace ctitan
