// Stage splitting and plan validation without processes: torchtitan's split examples
// (generate_llm_fqn_per_model_part), uneven splits, stage counts from layers_per_stage, and
// the config refusals by exact text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/parallel/pipeline/stage_split.h"

namespace ctitan::parallel::pipeline {
namespace {

using Parts = std::vector<std::vector<std::string>>;

// The shared decoder's names around its blocks: tok_embeddings, layers.i, norm, output.
const models::PipelineLayout kDecoder = models::decoder_plan({}).pipeline;

std::vector<std::vector<std::string>> split_modules(int n_layers, int stages, int first_less, int last_less) {
  return pipeline::split_modules(kDecoder, n_layers, stages, first_less, last_less);
}

PipelinePlanInput plan_input(int n_layers, int pp, const std::string& schedule, int local_batch = 8, int microbatch = 1) {
  PipelinePlanInput in;
  in.n_layers = n_layers;
  in.pp = pp;
  in.schedule = schedule;
  in.local_batch_size = local_batch;
  in.microbatch_size = microbatch;
  in.layout = kDecoder;
  return in;
}

// The texts below omit the "config error: " prefix every ConfigError carries.
void expect_refusal(const PipelinePlanInput& in, const std::string& text) {
  try {
    plan_pipeline(in);
    ADD_FAILURE() << "accepted, expected: " << text;
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "config error: " + text);
  }
}

TEST(PipelineStageSplit, TorchtitanExamples) {
  EXPECT_EQ(split_modules(6, 2, 1, 1),
            (Parts{{"tok_embeddings", "layers.0", "layers.1", "layers.2"}, {"layers.3", "layers.4", "layers.5", "norm", "output"}}));
  EXPECT_EQ(split_modules(6, 4, 1, 1), (Parts{{"tok_embeddings", "layers.0"},
                                              {"layers.1", "layers.2"},
                                              {"layers.3", "layers.4"},
                                              {"layers.5", "norm", "output"}}));
  EXPECT_EQ(split_modules(2, 4, 1, 1), (Parts{{"tok_embeddings"}, {"layers.0"}, {"layers.1"}, {"norm", "output"}}));
  // torchtitan's one-stage special case holds everything, whatever the weights.
  EXPECT_EQ(split_modules(2, 1, 3, 3), (Parts{{"tok_embeddings", "layers.0", "layers.1", "norm", "output"}}));
}

TEST(PipelineStageSplit, UnevenSlotsGoToTheFirstStages) {
  // E = 7 over 2: 4 + 3 slots.
  EXPECT_EQ(split_modules(5, 2, 1, 1),
            (Parts{{"tok_embeddings", "layers.0", "layers.1", "layers.2"}, {"layers.3", "layers.4", "norm", "output"}}));
  // E = 9 over 4: 3 + 2 + 2 + 2 slots.
  EXPECT_EQ(split_modules(7, 4, 1, 1), (Parts{{"tok_embeddings", "layers.0", "layers.1"},
                                              {"layers.2", "layers.3"},
                                              {"layers.4", "layers.5"},
                                              {"layers.6", "norm", "output"}}));
  // Weights move blocks: the embedding counting 0 leaves stage 0 a whole block more.
  EXPECT_EQ(split_modules(4, 2, 0, 1),
            (Parts{{"tok_embeddings", "layers.0", "layers.1", "layers.2"}, {"layers.3", "norm", "output"}}));
  EXPECT_EQ(split_modules(6, 2, 2, 2),
            (Parts{{"tok_embeddings", "layers.0", "layers.1", "layers.2"}, {"layers.3", "layers.4", "layers.5", "norm", "output"}}));
}

TEST(PipelineStageSplit, PlanDerivesStagesAndMicrobatches) {
  // Default: one stage per rank for 1F1B.
  PipelinePlan one = plan_pipeline(plan_input(6, 2, "1f1b", 8, 2));
  EXPECT_EQ(one.kind, ScheduleKind::k1F1B);
  EXPECT_EQ(one.shape.pp, 2);
  EXPECT_EQ(one.shape.stages_per_rank, 1);
  EXPECT_EQ(one.shape.microbatches, 4);
  EXPECT_EQ(one.module_fqns_per_stage, split_modules(6, 2, 1, 1));
  EXPECT_EQ(one.stages_of_rank(1), (std::vector<int>{1}));
  EXPECT_TRUE(one.simulation.completed);
  EXPECT_TRUE(one.warning.empty());

  // Default: two per rank for Interleaved; the CLI's tiny job (2 layers) splits [tok] [l0] [l1] [norm, output].
  PipelinePlan inter = plan_pipeline(plan_input(2, 2, "Interleaved1F1B", 4));
  EXPECT_EQ(inter.shape.stages_per_rank, 2);
  EXPECT_EQ(inter.module_fqns_per_stage, (Parts{{"tok_embeddings"}, {"layers.0"}, {"layers.1"}, {"norm", "output"}}));
  EXPECT_EQ(inter.stages_of_rank(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(inter.stages_of_rank(1), (std::vector<int>{1, 3}));

  // layers_per_stage 1 with 6 layers: ceil(8 / 1) = 8 stages, 4 per rank, loop style.
  PipelinePlanInput in = plan_input(6, 2, "Interleaved1F1B");
  in.layers_per_stage = 1;
  PipelinePlan deep = plan_pipeline(in);
  EXPECT_EQ(deep.shape.stages(), 8);
  EXPECT_EQ(deep.stages_of_rank(1), (std::vector<int>{1, 3, 5, 7}));
  // layers_per_stage 3 with 6 layers and pp 1: ceil(8 / 3) = 3 stages on one rank.
  in = plan_input(6, 1, "interleaved1f1b", 6);
  in.layers_per_stage = 3;
  EXPECT_EQ(plan_pipeline(in).module_fqns_per_stage,
            (Parts{{"tok_embeddings", "layers.0", "layers.1"}, {"layers.2", "layers.3", "layers.4"}, {"layers.5", "norm", "output"}}));
}

TEST(PipelineStageSplit, GPipeWithFewerMicrobatchesThanStagesRunsWithAWarning) {
  // (p - 1) / (m + p - 1) = 3 / 5.
  PipelinePlan plan = plan_pipeline(plan_input(6, 4, "GPipe", 2));
  EXPECT_EQ(plan.shape.microbatches, 2);
  EXPECT_NEAR(plan.simulation.idle_share[0], 0.6, 1e-12);
  EXPECT_EQ(plan.warning,
            "pipeline: GPipe runs 2 microbatches over 4 stages, so a rank idles 60% of each step (simulated, equal "
            "stages); more microbatches shrink the bubble");
}

TEST(PipelineStageSplit, RefusalsByExactText) {
  // 2
  expect_refusal(plan_input(6, 2, "1F1B", 8, 3),
                 "parallelism.pipeline_parallel_microbatch_size 3 does not divide training.local_batch_size 8");
  // 3
  expect_refusal(plan_input(6, 4, "1F1B", 2, 1),
                 "parallelism.pipeline_parallel_schedule 1F1B needs at least as many microbatches as stages: "
                 "training.local_batch_size 2 / pipeline_parallel_microbatch_size 1 = 2 microbatches for 4 stages; raise "
                 "local_batch_size, lower pipeline_parallel_microbatch_size, or use GPipe");
  // 4
  expect_refusal(plan_input(6, 2, "Interleaved1F1B", 5, 1),
                 "parallelism.pipeline_parallel_schedule Interleaved1F1B runs microbatches in rounds of "
                 "pipeline_parallel_degree 2: 5 microbatches do not split into 2 equal rounds; use a multiple of 2 (or "
                 "at most 2)");
  // 5
  expect_refusal(plan_input(2, 5, "GPipe", 5),
                 "parallelism: 5 pipeline stages for 2 layers + 1 (embeddings, pipeline_parallel_first_stage_less_layers) "
                 "+ 1 (norm and output, pipeline_parallel_last_stage_less_layers) = 4 layer slots would leave a stage "
                 "empty; lower pipeline_parallel_degree or raise pipeline_parallel_layers_per_stage");
  // 6, both weights
  PipelinePlanInput heavy = plan_input(4, 4, "GPipe");
  heavy.first_stage_less_layers = 3;
  expect_refusal(heavy,
                 "parallelism.pipeline_parallel_first_stage_less_layers 3 is more than the 2 layer slots each of 4 stages "
                 "gets (8 slots); lower it");
  heavy.first_stage_less_layers = 1;
  heavy.last_stage_less_layers = 3;
  expect_refusal(heavy,
                 "parallelism.pipeline_parallel_last_stage_less_layers 3 is more than the 2 layer slots each of 4 stages "
                 "gets (8 slots); lower it");
  // 7
  PipelinePlanInput lps = plan_input(6, 2, "Interleaved1F1B");
  lps.layers_per_stage = 3;
  expect_refusal(lps,
                 "parallelism.pipeline_parallel_layers_per_stage 3 gives ceil(8 / 3) = 3 stages, not a multiple of "
                 "pipeline_parallel_degree 2");
  // 8
  lps = plan_input(6, 2, "1F1B");
  lps.layers_per_stage = 2;
  expect_refusal(lps,
                 "parallelism.pipeline_parallel_schedule 1F1B runs one stage per rank, but "
                 "pipeline_parallel_layers_per_stage 2 gives 4 stages over pipeline_parallel_degree 2; use "
                 "Interleaved1F1B or pipeline_parallel_layers_per_stage >= 4");
  // 9
  lps = plan_input(6, 2, "interleaved1F1B");
  lps.layers_per_stage = 4;
  expect_refusal(lps,
                 "parallelism.pipeline_parallel_schedule Interleaved1F1B needs at least 2 stages per rank, but "
                 "pipeline_parallel_layers_per_stage 4 gives 2 stages over pipeline_parallel_degree 2; lower "
                 "pipeline_parallel_layers_per_stage");
  // 10
  expect_refusal(plan_input(6, 2, "ZBVZeroBubble"),
                 "parallelism.pipeline_parallel_schedule must be one of GPipe, 1F1B, Interleaved1F1B (got "
                 "'ZBVZeroBubble'; torchtitan's LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble and DualPipeV are not "
                 "implemented)");
}

TEST(PipelineStageSplit, RefusesNonPositiveSizes) {
  EXPECT_THROW(plan_pipeline(plan_input(6, 2, "1F1B", 8, 0)), ConfigError);
  PipelinePlanInput in = plan_input(6, 2, "1F1B");
  in.layers_per_stage = 0;
  EXPECT_THROW(plan_pipeline(in), ConfigError);
  in = plan_input(6, 2, "1F1B");
  in.first_stage_less_layers = -1;
  EXPECT_THROW(plan_pipeline(in), ConfigError);
}

// Validation refuses exactly what the rules forbid, and everything it accepts runs
// in the simulator (the logic_error backstop never fires). PyTorch's Interleaved rule is
// m % max(1, m / p) == 0: e.g. m = 6 with p = 4 is one round of 6 and runs.
TEST(PipelineStageSplit, AcceptsExactlyWhatTheMicrobatchRulesAllow) {
  for (const char* schedule : {"GPipe", "1F1B", "Interleaved1F1B"}) {
    for (int pp = 1; pp <= 4; ++pp) {
      for (int m = 1; m <= 12; ++m) {
        SCOPED_TRACE(std::string(schedule) + " pp=" + std::to_string(pp) + " m=" + std::to_string(m));
        ScheduleKind kind = parse_schedule(schedule);
        int stages = pp * (kind == ScheduleKind::kInterleaved1F1B ? 2 : 1);
        bool allowed = kind == ScheduleKind::kGPipe || (kind == ScheduleKind::k1F1B && m >= stages) ||
                       (kind == ScheduleKind::kInterleaved1F1B && m % std::max(1, m / pp) == 0);
        try {
          PipelinePlan plan = plan_pipeline(plan_input(16, pp, schedule, m));
          EXPECT_TRUE(allowed);
          EXPECT_TRUE(plan.simulation.completed);
          EXPECT_EQ(plan.shape.stages(), stages);
        } catch (const ConfigError& e) {
          EXPECT_FALSE(allowed) << e.what();
        }
      }
    }
  }
  expect_refusal(plan_input(16, 4, "Interleaved1F1B", 9),
                 "parallelism.pipeline_parallel_schedule Interleaved1F1B runs microbatches in rounds of "
                 "pipeline_parallel_degree 4: 9 microbatches do not split into 2 equal rounds; use a multiple of 4 (or "
                 "at most 4)");
}

TEST(PipelineStageSplit, DescribeStageCollapsesRunsOfBlocks) {
  EXPECT_EQ(describe_stage({"tok_embeddings", "layers.0", "layers.1", "layers.2"}, "layers"), "tok_embeddings, layers.0-2");
  EXPECT_EQ(describe_stage({"layers.3", "norm", "output"}, "layers"), "layers.3, norm, output");
  EXPECT_EQ(describe_stage({"layers.9", "layers.10", "layers.11"}, "layers"), "layers.9-11");
  EXPECT_EQ(describe_stage({"layers.0", "layers.2", "layers.3"}, "layers"), "layers.0, layers.2-3");
  EXPECT_EQ(describe_stage({}, "layers"), "");
}

}  // namespace
}  // namespace ctitan::parallel::pipeline

namespace ctitan::parallel::pipeline {
namespace {

PipelinePlanInput with_parts(const std::string& schedule, Parts parts) {
  auto in = plan_input(2, 2, schedule);
  in.module_fqns_per_model_part = std::move(parts);
  return in;
}

// parallelism.module_fqns_per_model_part replaces the weighted split, and sets the stage count.
TEST(PipelineStageSplit, GivenPartsAreTheStages) {
  const Parts uneven{{"tok_embeddings"}, {"layers.0", "layers.1", "norm", "output"}};
  EXPECT_EQ(plan_pipeline(with_parts("1F1B", uneven)).module_fqns_per_stage, uneven);
  // Four parts over pp 2 is two stages per rank; norm and output may sit on different stages.
  const Parts four{{"tok_embeddings"}, {"layers.0", "layers.1"}, {"norm"}, {"output"}};
  auto plan = plan_pipeline(with_parts("Interleaved1F1B", four));
  EXPECT_EQ(plan.module_fqns_per_stage, four);
  EXPECT_EQ(plan.shape.stages_per_rank, 2);
  EXPECT_EQ(plan.stages_of_rank(1), (std::vector<int>{1, 3}));
}

// Each part, module and count mistake is one line naming the part and the module.
TEST(PipelineStageSplit, GivenPartsRefusalsByExactText) {
  const std::string key = "parallelism.module_fqns_per_model_part";
  expect_refusal(with_parts("1F1B", {{"tok_embeddings", "layers.1"}, {"layers.0", "norm", "output"}}),
                 key + " part 0: 'layers.1' where 'layers.0' comes next; list every module once, in forward order");
  expect_refusal(with_parts("1F1B", {{"tok_embeddings", "layers.0"}, {"layers.1", "norm", "head"}}),
                 key + " part 1: 'head' is not a module of the model (tok_embeddings, layers.0-1, norm, output)");
  expect_refusal(with_parts("1F1B", {{"tok_embeddings", "layers.0"}, {"layers.1", "norm"}}),
                 key + " leaves out 'output' and what follows it; list every module once, in forward order");
  expect_refusal(with_parts("1F1B", {{"tok_embeddings", "layers.0", "layers.1", "norm", "output"}, {}}),
                 key + " part 1 is empty; every stage needs a module");
  expect_refusal(with_parts("1F1B", {{"tok_embeddings", "layers.0"}, {"layers.0", "layers.1", "norm", "output"}}),
                 key + " part 1: 'layers.0' where 'layers.1' comes next; list every module once, in forward order");
  expect_refusal(with_parts("1F1B", {{"tok_embeddings"}, {"layers.0"}, {"layers.1", "norm", "output"}}),
                 key + " has 3 parts, not a multiple of pipeline_parallel_degree 2");
  expect_refusal(with_parts("GPipe", {{"tok_embeddings"}, {"layers.0"}, {"layers.1"}, {"norm", "output"}}),
                 key + " has 4 parts, but pipeline_parallel_schedule GPipe runs one stage per rank (2 parts); "
                       "use Interleaved1F1B for more");
  expect_refusal(with_parts("Interleaved1F1B", {{"tok_embeddings", "layers.0"}, {"layers.1", "norm", "output"}}),
                 key + " has 2 parts, but pipeline_parallel_schedule Interleaved1F1B needs at least 2 stages per "
                       "rank (4 parts or more)");
  auto both = with_parts("1F1B", {{"tok_embeddings", "layers.0"}, {"layers.1", "norm", "output"}});
  both.layers_per_stage = 2;
  expect_refusal(both, key + " and pipeline_parallel_layers_per_stage 2 both set the stages; set one of them");
}

}  // namespace
}  // namespace ctitan::parallel::pipeline
