#include "ctitan/train/trainer.h"

#include <gtest/gtest.h>

#include "ctitan/common/error.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::train {
namespace {

using ctitan::testing::TempDir;

std::map<std::string, torch::Tensor> grads_of(Trainer& trainer) {
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : trainer.model().named_parameters()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

// k microbatches of b sequences against one batch of k·b sequences, fp32, same weights and data.
// The only difference is summation order, so gradients agree to float rounding: 1e-6 relative to
// the largest gradient entry is about 10 ulps of accumulated fp32 error over these sizes.
TEST(Trainer, GradientAccumulationEqualsOneBigBatch) {
  TempDir dir;
  auto big_config = ctitan::testing::tiny_job_config(dir.path());
  big_config.training.local_batch_size = 4;
  auto accum_config = big_config;
  accum_config.training.local_batch_size = 1;
  accum_config.training.global_batch_size = 4;
  Trainer big(big_config), accum(accum_config);
  ASSERT_EQ(accum.gradient_accumulation_steps(), 4);

  // Uneven valid-token counts per microbatch make the token weighting matter: a per-microbatch
  // mean would weight the sequences unequally.
  auto batch = big.dataloader().next();
  batch.labels[0].slice(0, 0, 20).fill_(-100);
  batch.labels[2].slice(0, 0, 5).fill_(-100);
  std::vector<data::Batch> micro;
  for (int64_t i = 0; i < 4; ++i) micro.push_back({batch.inputs.slice(0, i, i + 1), batch.labels.slice(0, i, i + 1)});

  auto [big_loss, big_rank_loss] = big.forward_backward({batch});
  auto accum_loss = accum.forward_backward(micro).first;
  EXPECT_NEAR(big_loss.item<double>(), accum_loss.item<double>(), 1e-6);
  // One process: its own tokens are the global batch, so its loss is the global one.
  EXPECT_EQ(big_rank_loss.item<double>(), big_loss.item<double>());
  auto big_grads = grads_of(big), accum_grads = grads_of(accum);
  for (const auto& [name, g] : big_grads) {
    double scale = g.abs().max().item<double>();
    EXPECT_LE((g - accum_grads[name]).abs().max().item<double>(), 1e-6 * scale + 1e-12) << name;
  }
}

// The tiny model on a cyclic sequence (period 16, vocab 32): the next token is determined by
// the current one, so the loss can go from ln(32) = 3.47 to near zero. 60 steps at lr 3e-3 reach
// well under 0.2 in fp32; 0.5 leaves room for thread-count differences in float rounding.
TEST(Trainer, LossFallsOnALearnableTask) {
  TempDir dir;
  Trainer trainer(ctitan::testing::tiny_job_config(dir.path()));
  auto first = trainer.train_step({trainer.dataloader().next()}).loss.item<double>();
  EXPECT_NEAR(first, std::log(32.0), 0.5);
  trainer.train();
  auto last = trainer.forward_backward({trainer.dataloader().next()}).first.item<double>();
  EXPECT_LT(last, 0.5);
}

TEST(Trainer, Bf16Trains) {
  TempDir dir;
  auto config = ctitan::testing::tiny_job_config(dir.path());
  config.training.mixed_precision_param = torch::kBFloat16;
  Trainer trainer(config);
  trainer.train();
  auto last = trainer.forward_backward({trainer.dataloader().next()}).first.item<double>();
  EXPECT_LT(last, 1.0);  // bf16 matmuls: looser than fp32's 0.5, still far below ln(32) = 3.47
  for (const auto& p : trainer.model().parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);  // fp32 master
}

// Saving every stateful part after 10 steps and loading it into a fresh trainer gives the
// same next steps, bitwise: the state dicts carry everything training depends on.
TEST(Trainer, StateDictsResumeBitwise) {
  TempDir dir;
  auto config = ctitan::testing::tiny_job_config(dir.path());
  config.training.steps = 10;
  Trainer a(config);
  a.train();
  auto state = a.state_dicts();
  std::map<std::string, StateDict> saved;
  for (const auto& [part, dict] : state) {
    for (const auto& [k, v] : dict) saved[part][k] = v.clone();
  }
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i) expected.push_back(a.train_step({a.dataloader().next()}).loss.item<double>());

  config.debug.seed = 999;  // different init: the load must overwrite it
  Trainer b(config);
  b.load_state_dicts(saved);
  EXPECT_EQ(b.step(), 10);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.train_step({b.dataloader().next()}).loss.item<double>(), expected[size_t(i)]);
}

// A learning rate of 1e30 makes step 1's update huge and step 2's attention overflow: the
// gradient norm is not finite. The run stops with an error naming the step before the optimizer
// applies that update, so the parameters stay finite (and a checkpoint never holds NaNs).
TEST(Trainer, NonFiniteGradientNormStopsBeforeTheUpdate) {
  TempDir dir;
  auto config = ctitan::testing::tiny_job_config(dir.path());
  config.optimizer.lr = 1e30;
  config.lr_scheduler.warmup_steps = 0;
  config.training.steps = 5;
  Trainer trainer(config);
  try {
    trainer.train();
    FAIL() << "training with lr 1e30 finished";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("the gradient norm is"), std::string::npos) << what;
    EXPECT_NE(what.find("stopped before the optimizer update"), std::string::npos) << what;
    EXPECT_EQ(what.rfind("step ", 0), 0u) << what;
  }
  EXPECT_LT(trainer.step(), 5);
  for (const auto& p : trainer.model().named_parameters()) {
    EXPECT_TRUE(torch::isfinite(p.value()).all().item<bool>()) << p.key();
  }
}

// A batch no machine holds (10^8 sequences: the logits alone are 400 GB) is refused before the
// model is built, with the estimate and the keys to change, not an allocator's out-of-memory.
TEST(Trainer, AStepThatCannotFitIsRefusedWithTheNumbers) {
  TempDir dir;
  auto config = ctitan::testing::tiny_job_config(dir.path());
  config.training.local_batch_size = 100000000;
  try {
    Trainer trainer(config);
    FAIL() << "a 10^8-sequence batch was accepted";
  } catch (const ConfigError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("the step needs about"), std::string::npos) << what;
    EXPECT_NE(what.find("lower training.local_batch_size (100000000)"), std::string::npos) << what;
  }
}

// /dev/zero never ends (issue #17: it grew memory to 11 GB): only regular files and directories
// are datasets.
TEST(Trainer, ADeviceAsTheDatasetIsRefused) {
  TempDir dir;
  auto config = ctitan::testing::tiny_job_config(dir.path());
  config.training.dataset_path = "/dev/zero";
  try {
    Trainer trainer(config);
    FAIL() << "/dev/zero was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "dataset error: training.dataset_path '/dev/zero' is neither a regular file nor a directory");
  }
}

}  // namespace
}  // namespace ctitan::train
