// The pipeline runtime on 2 thread ranks (a Gloo pp group over an in-memory store): each stage's
// gradients and the summed loss equal one process running the same microbatches one after the
// other, accumulating into .grad, with the same loss scaling (summed CE / all tokens).
#include <gtest/gtest.h>

#include "ctitan/distributed/communicator.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/parallel/pipeline/runtime.h"
#include "ctitan/parallel/pipeline/stage_model.h"
#include "ctitan/parallel/pipeline/stage_split.h"
#include "ctitan/components/loss.h"
#include "support/thread_ranks.h"

namespace ctitan::parallel::pipeline {
namespace {

using models::ModelArgs;
using models::Transformer;

ModelArgs pp_tiny_args() {
  ModelArgs args;
  args.dim = 32;
  args.n_layers = 4;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 64;
  args.multiple_of = 32;
  args.max_seq_len = 16;
  return args;
}

Transformer seeded_model(const ModelArgs& args) {
  torch::manual_seed(7);
  Transformer model(args);
  models::init_weights(*model);
  return model;
}

struct Reference {
  torch::Tensor loss;
  std::map<std::string, torch::Tensor> grads;
};

// One process: the same microbatches in order, each loss = summed CE / all valid tokens.
Reference one_process(const ModelArgs& args, const torch::Tensor& inputs, const torch::Tensor& labels, int64_t rows) {
  auto model = seeded_model(args);
  auto denominator = components::count_valid_tokens(labels).to(torch::kFloat);
  auto loss_sum = torch::zeros({});
  for (int64_t row = 0; row < inputs.size(0); row += rows) {
    auto loss = components::summed_cross_entropy(model->forward(inputs.narrow(0, row, rows)), labels.narrow(0, row, rows)) /
                denominator;
    loss.backward();
    loss_sum += loss.detach();
  }
  Reference out{loss_sum, {}};
  for (const auto& p : model->named_parameters()) out.grads[p.key()] = p.value().grad();
  return out;
}

void expect_pipeline_equals_one_process(const std::string& schedule, int local_batch, int microbatch_size) {
  const auto args = pp_tiny_args();
  const int64_t T = 8;
  torch::manual_seed(11);
  auto inputs = torch::randint(args.vocab_size, {local_batch, T}, torch::kLong);
  auto labels = torch::randint(args.vocab_size, {local_batch, T}, torch::kLong);
  labels[0][3] = components::kIgnoreIndex;  // the denominator counts valid tokens only
  auto reference = one_process(args, inputs, labels, microbatch_size);

  PipelinePlanInput input{int(args.n_layers), 2, schedule, local_batch, microbatch_size};
  input.layout = models::decoder_plan(args).pipeline;
  auto plan = plan_pipeline(input);
  // Every stage's model is built here, from the same seed as the reference: the global RNG is
  // not for threads.
  std::vector<Transformer> stages;
  for (int s = 0; s < plan.shape.stages(); ++s) {
    stages.push_back(seeded_model(args));
    keep_stage_modules(*stages.back(), plan.module_fqns_per_stage.at(size_t(s)));
  }
  std::vector<torch::Tensor> losses(2);
  auto store = testing::in_memory_store();
  auto errors = testing::on_thread_ranks(2, [&](int rank) {
    auto group = distributed::Communicator::create(store, "pp", rank, 2, std::chrono::seconds(60), "127.0.0.1");
    StageFunctions functions{[&](int stage, const torch::Tensor& x) { return stages.at(size_t(stage))->forward(x); },
                             [](const torch::Tensor& logits, const torch::Tensor& y) {
                               return components::summed_cross_entropy(logits, y);
                             }};
    PipelineRuntime runtime(plan.shape, plan.kind, rank, group, {{microbatch_size, T, args.dim}}, functions);
    auto denominator = components::count_valid_tokens(labels).to(torch::kFloat);
    losses[size_t(rank)] = runtime.run(inputs, labels, denominator);
  });
  ASSERT_EQ(testing::rank_errors(errors), "");

  // Same ops on the same rows in the same accumulation order; only the GEMM threading may differ,
  // so fp32 agrees to rounding (1e-6 relative; a gradient divided by m, or a loss counted twice,
  // is off by a factor).
  EXPECT_EQ(losses[0].item<float>(), 0.0f);  // no last stage on rank 0
  EXPECT_NEAR(losses[1].item<float>(), reference.loss.item<float>(), 1e-6 * reference.loss.item<float>());
  size_t compared = 0;
  for (const auto& stage : stages) {
    for (const auto& p : stage->named_parameters()) {
      const auto& expected = reference.grads.at(p.key());
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      double scale = expected.abs().max().item<double>();
      EXPECT_LE((p.value().grad() - expected).abs().max().item<double>(), 1e-5 * scale + 1e-9) << p.key();
      ++compared;
    }
  }
  EXPECT_EQ(compared, reference.grads.size());  // the stages together hold every parameter once
}

TEST(PipelineRuntime, GPipeEqualsOneProcess) { expect_pipeline_equals_one_process("GPipe", 4, 1); }

TEST(PipelineRuntime, OneFOneBEqualsOneProcess) { expect_pipeline_equals_one_process("1F1B", 4, 1); }

TEST(PipelineRuntime, OneFOneBWithTwoRowMicrobatchesEqualsOneProcess) {
  expect_pipeline_equals_one_process("1F1B", 6, 2);
}

// Two stages per rank, [tok_embeddings, layers.0] [layers.1, layers.2] [layers.3] [norm, output]:
// rank 0 holds stages 0 and 2, rank 1 stages 1 and 3; microbatches in rounds of 2.
TEST(PipelineRuntime, Interleaved1F1BEqualsOneProcess) { expect_pipeline_equals_one_process("Interleaved1F1B", 4, 1); }

// GPipe runs with fewer microbatches than stages (1F1B refuses that: torchtitan #775).
TEST(PipelineRuntime, GPipeWithOneMicrobatchEqualsOneProcess) { expect_pipeline_equals_one_process("GPipe", 1, 1); }

// A copy has the same weights and leaves the default generator where it was.
TEST(PipelineStageModel, CopyHasTheSameWeightsAndDrawsNoRandomNumbers) {
  auto model = seeded_model(pp_tiny_args());
  torch::manual_seed(7);
  torch::rand({4});
  auto copy = copy_model(*model);
  auto after = torch::rand({4});
  torch::manual_seed(7);
  torch::rand({4});
  EXPECT_TRUE(after.equal(torch::rand({4})));
  auto source = model->named_parameters();
  for (const auto& p : copy->named_parameters()) EXPECT_TRUE(p.value().equal(source[p.key()])) << p.key();
  EXPECT_NE(copy->tok_embeddings->weight.data_ptr(), model->tok_embeddings->weight.data_ptr());
}

// A stage keeps its modules under their unsharded names and drops the rest with their parameters.
TEST(PipelineStageModel, KeepsUnshardedNamesAndDropsTheRest) {
  auto model = seeded_model(pp_tiny_args());
  keep_stage_modules(*model, {"layers.2", "layers.3", "norm", "output"});
  std::vector<std::string> names;
  for (const auto& p : model->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names.front(), "layers.2.attention.wq.weight");
  EXPECT_EQ(names.back(), "output.weight");
  for (const auto& name : names) {
    EXPECT_EQ(name.rfind("tok_embeddings", 0), std::string::npos) << name;
    EXPECT_EQ(name.rfind("layers.0.", 0), std::string::npos) << name;
    EXPECT_EQ(name.rfind("layers.1.", 0), std::string::npos) << name;
  }
  EXPECT_THROW(keep_stage_modules(*model, {"layers.9"}), std::logic_error);
}

}  // namespace
}  // namespace ctitan::parallel::pipeline
