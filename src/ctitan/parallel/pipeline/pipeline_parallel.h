#pragma once
// Pipeline parallelism applied to a built model from outside, as torchtitan's pipeline_llm:
// validate the config, split the layers into stages, keep this rank's stage of the model, and
// build the runtime that runs the schedule. The trainer then calls run() per local batch.
#include <memory>
#include <string>

#include "ctitan/config/job_config.h"
#include "ctitan/models/llama/model.h"
#include "ctitan/parallel/pipeline/runtime.h"
#include "ctitan/parallel/pipeline/stage_split.h"

namespace ctitan::parallel::pipeline {

// The plan's inputs from the config.
PipelinePlanInput plan_input(const config::JobConfig& config, int64_t n_layers);

// ConfigError for what pipeline parallelism does not compose with yet (DDP, TP,
// Interleaved1F1B's several stages per rank, validation), one line naming the keys.
void refuse_unsupported(const config::JobConfig& config, const PipelinePlan& plan);

struct PipelineStage {
  PipelinePlan plan;
  int pp_rank = 0;
  int stage = 0;  // this rank's stage
  int64_t microbatch_size = 1;
  bool first() const { return stage == 0; }
  bool last() const { return stage == plan.shape.stages() - 1; }
  // "pipeline: pp 2, 1F1B, 4 microbatches of 1, rank's stages [0]: tok_embeddings, layers.0-2"
  std::string describe() const;
};

// Plans, refuses what is not supported, and prunes `model` to the stage of `pp_rank`.
PipelineStage split_into_stage(models::llama::TransformerImpl& model, const config::JobConfig& config, int pp_rank);

}  // namespace ctitan::parallel::pipeline
