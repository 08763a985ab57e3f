#include "ctitan/parallel/pipeline/pipeline_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ctitan/common/error.h"
#include "ctitan/parallel/pipeline/stage_model.h"

namespace ctitan::parallel::pipeline {

PipelinePlanInput plan_input(const config::JobConfig& config, int64_t n_layers, const models::PipelineLayout& layout) {
  const auto& p = config.parallelism;
  return {int(n_layers),
          int(p.pipeline_parallel_degree),
          p.pipeline_parallel_schedule,
          int(config.training.local_batch_size),
          int(p.pipeline_parallel_microbatch_size),
          int(p.pipeline_parallel_layers_per_stage),
          int(p.pipeline_parallel_first_stage_less_layers),
          int(p.pipeline_parallel_last_stage_less_layers),
          p.module_fqns_per_model_part,
          layout};
}

std::string PipelineStages::describe() const {
  std::vector<std::string> parts;
  for (int s : stages) {
    parts.push_back(fmt::format("stage {} of {}: {}", s, plan.shape.stages(),
                                describe_stage(plan.module_fqns_per_stage.at(size_t(s)), blocks)));
  }
  return fmt::format("pipeline: pp {}, {}, {} microbatches of {} rows, rank {}'s {}", plan.shape.pp,
                     schedule_name(plan.kind), plan.shape.microbatches, microbatch_size, pp_rank,
                     fmt::join(parts, "; "));
}

PipelineStages split_into_stages(models::TransformerImpl& model, const config::JobConfig& config,
                                 const models::PipelineLayout& layout, int pp_rank) {
  PipelineStages out;
  out.plan = plan_pipeline(plan_input(config, model.args().n_layers, layout));
  out.blocks = layout.blocks;
  out.pp_rank = pp_rank;
  out.microbatch_size = config.parallelism.pipeline_parallel_microbatch_size;
  out.stages = out.plan.stages_of_rank(pp_rank);
  for (size_t k = 1; k < out.stages.size(); ++k) {
    out.more_models.push_back(copy_model(model));
    keep_stage_modules(*out.more_models.back(), out.plan.module_fqns_per_stage.at(size_t(out.stages[k])));
  }
  keep_stage_modules(model, out.plan.module_fqns_per_stage.at(size_t(out.stages[0])));
  return out;
}

}  // namespace ctitan::parallel::pipeline
