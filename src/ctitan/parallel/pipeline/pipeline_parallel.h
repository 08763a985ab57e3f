#pragma once
// Pipeline parallelism applied to a built model from outside, as torchtitan's pipeline_llm:
// validate the config, split the layers into stages, keep this rank's stage of the model, and
// build the runtime that runs the schedule. The trainer then calls run() per local batch.
#include <memory>
#include <string>

#include "ctitan/config/job_config.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/parallel/pipeline/runtime.h"
#include "ctitan/parallel/pipeline/stage_split.h"

namespace ctitan::parallel::pipeline {

// The plan's inputs from the config, with the family's module names around the blocks.
PipelinePlanInput plan_input(const config::JobConfig& config, int64_t n_layers, const models::PipelineLayout& layout);

struct PipelineStages {
  PipelinePlan plan;
  int pp_rank = 0;
  std::vector<int> stages;  // this rank's, loop style: pp_rank, pp_rank + pp, ...
  int64_t microbatch_size = 1;
  std::string blocks;       // the layout's block prefix ("layers"), for describe()
  // The models of stages[1..] (Interleaved1F1B); stages[0] is the model passed in, pruned.
  std::vector<models::Transformer> more_models;
  // "pipeline: pp 2, 1F1B, 4 microbatches of 1 rows, rank 0's stages 0 of 2: tok_embeddings, layers.0"
  std::string describe() const;
};

// Plans with the family's `layout` (ConfigError for a plan that cannot run) and turns `model`
// into the first stage of `pp_rank` (copies of it into the others first).
PipelineStages split_into_stages(models::TransformerImpl& model, const config::JobConfig& config,
                                 const models::PipelineLayout& layout, int pp_rank);

}  // namespace ctitan::parallel::pipeline
