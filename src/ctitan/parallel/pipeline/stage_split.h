#pragma once
// Which model modules each pipeline stage holds, and the validated plan a pipeline run follows:
// torchtitan's stage count and weighted split (pipeline_llm, generate_llm_fqn_per_model_part),
// loop-style stage-to-rank mapping, the schedule, and the config refusals. Pure functions.
#include <string>
#include <vector>

#include "ctitan/models/common/parallelize_plan.h"
#include "ctitan/parallel/pipeline/schedule.h"
#include "ctitan/parallel/pipeline/schedule_sim.h"

namespace ctitan::parallel::pipeline {

// The [parallelism] keys, torchtitan's names and defaults (docs/design/pipeline_parallel.md,
// decision 1), plus the two figures they depend on.
struct PipelinePlanInput {
  int n_layers;          // model.n_layers
  int pp;                // parallelism.pipeline_parallel_degree
  std::string schedule;  // parallelism.pipeline_parallel_schedule, as the user spelled it
  int local_batch_size;  // training.local_batch_size: one schedule run's rows
  int microbatch_size;   // parallelism.pipeline_parallel_microbatch_size
  int layers_per_stage = -1;         // -1: one stage per rank (two for Interleaved1F1B)
  int first_stage_less_layers = 1;   // layer slots tok_embeddings counts for
  int last_stage_less_layers = 1;    // layer slots norm + output count for
  // parallelism.module_fqns_per_model_part: the stages' modules as the user gave them, which
  // replaces the weighted split (and sets the stage count). Empty: derived.
  std::vector<std::vector<std::string>> module_fqns_per_model_part = {};
  // The family's module names around the blocks (ParallelizePlan::pipeline).
  models::PipelineLayout layout = {};
};

struct PipelinePlan {
  ScheduleKind kind;
  PipeShape shape;
  // Per stage, in forward order: {"tok_embeddings", "layers.0", "layers.1"}, {"layers.2", "norm", "output"}.
  std::vector<std::vector<std::string>> module_fqns_per_stage;
  // The simulated run of the lowered plan (t_f = 1, t_b = 2): completed, with the bubble.
  SimResult simulation;
  // Non-empty when the plan runs but idles a lot: GPipe or Interleaved1F1B with fewer
  // microbatches than stages (torchtitan warns there too). One line, names the bubble.
  std::string warning;
  // Loop style: r, r + pp, r + 2pp, ...
  std::vector<int> stages_of_rank(int pp_rank) const;
};

// Throws ConfigError (common/error.h), one line naming the keys and values, for: an unknown
// schedule; a microbatch size that does not divide the local batch; a stage count the schedule
// cannot place on pp ranks; a split that leaves a stage empty, counts the embeddings or norm +
// output as more slots than a stage has, or is not the model's modules once each in forward
// order; too few (1F1B) or uneven (Interleaved1F1B) microbatches. The texts are pinned in
// stage_split_test.cpp. std::logic_error naming the stuck action if the simulator finds an
// accepted plan cannot run.
PipelinePlan plan_pipeline(const PipelinePlanInput& input);

// torchtitan's generate_llm_fqn_per_model_part, without validation (plan_pipeline refuses the
// splits it cannot make first): E = n_layers + first_less + last_less slots, E / S per stage and
// one more for the first E % S stages; stage 0 opens with layout.before_blocks (first_less slots),
// the last stage closes with layout.after_blocks (last_less slots). S == 1 holds everything.
std::vector<std::vector<std::string>> split_modules(const models::PipelineLayout& layout, int n_layers, int stages,
                                                    int first_less, int last_less);

// "tok_embeddings, layers.0-2" for the startup line: runs of consecutive blocks (named by
// `blocks`, the layout's) collapse.
std::string describe_stage(const std::vector<std::string>& fqns, const std::string& blocks);

}  // namespace ctitan::parallel::pipeline
