#include "ctitan/parallel/pipeline/stage_split.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "ctitan/common/error.h"

namespace ctitan::parallel::pipeline {

namespace {

std::string str(int v) { return std::to_string(v); }

void require_positive(int value, const char* key) {
  if (value < 1) throw ConfigError(std::string(key) + " must be positive (got " + str(value) + ")");
}

void require_non_negative(int value, const char* key) {
  if (value < 0) throw ConfigError(std::string(key) + " must be >= 0 (got " + str(value) + ")");
}

// A given split's stage count against the schedule, the same rule as for layers_per_stage: a
// multiple of pp, one stage per rank for GPipe/1F1B, at least two for Interleaved1F1B.
int stages_per_rank_of_parts(const PipelinePlanInput& in, ScheduleKind kind) {
  const int stages = int(in.module_fqns_per_model_part.size());
  const std::string what = "parallelism.module_fqns_per_model_part has " + str(stages) + " parts";
  if (stages % in.pp != 0)
    throw ConfigError(what + ", not a multiple of pipeline_parallel_degree " + str(in.pp));
  const int v = stages / in.pp;
  if (kind != ScheduleKind::kInterleaved1F1B && v != 1)
    throw ConfigError(what + ", but pipeline_parallel_schedule " + schedule_name(kind) + " runs one stage per rank (" +
                      str(in.pp) + " parts); use Interleaved1F1B for more");
  if (kind == ScheduleKind::kInterleaved1F1B && v < 2)
    throw ConfigError(what + ", but pipeline_parallel_schedule Interleaved1F1B needs at least 2 stages per rank (" +
                      str(2 * in.pp) + " parts or more)");
  return v;
}

// As torchtitan's pipeline_llm: ceil(slots / layers_per_stage) stages, a multiple of pp, one per
// rank for single-stage schedules and at least two for multi-stage ones; without
// layers_per_stage, one stage per rank for single-stage schedules and two for multi-stage ones.
int stages_per_rank(const PipelinePlanInput& in, ScheduleKind kind, int slots) {
  const bool single_stage = kind != ScheduleKind::kInterleaved1F1B;
  if (!in.module_fqns_per_model_part.empty()) {
    if (in.layers_per_stage != -1)
      throw ConfigError("parallelism.module_fqns_per_model_part and pipeline_parallel_layers_per_stage " +
                        str(in.layers_per_stage) + " both set the stages; set one of them");
    return stages_per_rank_of_parts(in, kind);
  }
  if (in.layers_per_stage == -1) return single_stage ? 1 : 2;
  if (in.layers_per_stage < 1)
    throw ConfigError("parallelism.pipeline_parallel_layers_per_stage must be positive, or -1 for one stage per rank "
                      "(got " + str(in.layers_per_stage) + ")");
  const int lps = in.layers_per_stage;
  const int stages = (slots + lps - 1) / lps;
  if (stages % in.pp != 0)
    throw ConfigError("parallelism.pipeline_parallel_layers_per_stage " + str(lps) + " gives ceil(" + str(slots) +
                      " / " + str(lps) + ") = " + str(stages) + " stages, not a multiple of pipeline_parallel_degree " +
                      str(in.pp));
  const int v = stages / in.pp;
  const std::string name = schedule_name(kind);
  if (single_stage && v != 1)
    // ceil(slots / pp) is the smallest layers_per_stage that gives pp stages.
    throw ConfigError("parallelism.pipeline_parallel_schedule " + name + " runs one stage per rank, but "
                      "pipeline_parallel_layers_per_stage " + str(lps) + " gives " + str(stages) +
                      " stages over pipeline_parallel_degree " + str(in.pp) +
                      "; use Interleaved1F1B or pipeline_parallel_layers_per_stage >= " +
                      str((slots + in.pp - 1) / in.pp));
  if (!single_stage && v < 2)
    throw ConfigError("parallelism.pipeline_parallel_schedule " + name + " needs at least 2 stages per rank, but "
                      "pipeline_parallel_layers_per_stage " + str(lps) + " gives " + str(stages) +
                      " stages over pipeline_parallel_degree " + str(in.pp) +
                      "; lower pipeline_parallel_layers_per_stage");
  return v;
}

// A given split must be the model's modules once each, in forward order, with no empty part:
// stages run in part order, and stage_model keeps exactly the modules of its part.
void check_given_split(const PipelinePlanInput& in) {
  const auto& parts = in.module_fqns_per_model_part;
  const auto expected = in.layout.modules(in.n_layers);  // forward order
  size_t next = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const std::string where = "parallelism.module_fqns_per_model_part part " + str(int(p));
    if (parts[p].empty()) throw ConfigError(where + " is empty; every stage needs a module");
    for (const auto& fqn : parts[p]) {
      if (std::find(expected.begin(), expected.end(), fqn) == expected.end())
        throw ConfigError(where + ": '" + fqn + "' is not a module of the model (" +
                          describe_stage(expected, in.layout.blocks) + ")");
      if (next >= expected.size() || fqn != expected[next])
        throw ConfigError(where + ": '" + fqn + "' where '" + (next < expected.size() ? expected[next] : "nothing") +
                          "' comes next; list every module once, in forward order");
      ++next;
    }
  }
  if (next < expected.size())
    throw ConfigError("parallelism.module_fqns_per_model_part leaves out '" + expected[next] +
                      "' and what follows it; list every module once, in forward order");
}

// The checks of generate_llm_fqn_per_model_part (which skips them for one stage): every stage
// gets a slot, and neither first_less nor last_less exceeds a stage's slots.
void check_split(const PipelinePlanInput& in, int stages, int slots) {
  if (!in.module_fqns_per_model_part.empty()) return check_given_split(in);
  if (stages == 1) return;
  if (stages > slots)
    throw ConfigError("parallelism: " + str(stages) + " pipeline stages for " + str(in.n_layers) + " layers + " +
                      str(in.first_stage_less_layers) + " (embeddings, pipeline_parallel_first_stage_less_layers) + " +
                      str(in.last_stage_less_layers) + " (norm and output, pipeline_parallel_last_stage_less_layers) = " +
                      str(slots) + " layer slots would leave a stage empty; lower pipeline_parallel_degree or raise "
                      "pipeline_parallel_layers_per_stage");
  const int per_stage = slots / stages;
  auto check_weight = [&](int weight, const char* key) {
    if (weight > per_stage)
      throw ConfigError(std::string("parallelism.") + key + " " + str(weight) + " is more than the " + str(per_stage) +
                        " layer slots each of " + str(stages) + " stages gets (" + str(slots) + " slots); lower it");
  };
  check_weight(in.first_stage_less_layers, "pipeline_parallel_first_stage_less_layers");
  check_weight(in.last_stage_less_layers, "pipeline_parallel_last_stage_less_layers");
}

// The microbatch rules of PyTorch's Schedule1F1B (m >= stages; fewer hung, #775) and
// ScheduleInterleaved1F1B (m % rounds == 0).
void check_microbatches(const PipelinePlanInput& in, ScheduleKind kind, const PipeShape& shape) {
  const int m = shape.microbatches;
  if (kind == ScheduleKind::k1F1B && m < shape.stages())
    throw ConfigError("parallelism.pipeline_parallel_schedule 1F1B needs at least as many microbatches as stages: "
                      "training.local_batch_size " + str(in.local_batch_size) + " / pipeline_parallel_microbatch_size " +
                      str(in.microbatch_size) + " = " + str(m) + " microbatches for " + str(shape.stages()) +
                      " stages; raise local_batch_size, lower pipeline_parallel_microbatch_size, or use GPipe");
  const int rounds = std::max(1, m / shape.pp);
  if (kind == ScheduleKind::kInterleaved1F1B && m % rounds != 0)
    throw ConfigError("parallelism.pipeline_parallel_schedule Interleaved1F1B runs microbatches in rounds of "
                      "pipeline_parallel_degree " + str(shape.pp) + ": " + str(m) + " microbatches do not split into " +
                      str(rounds) + " equal rounds; use a multiple of " + str(shape.pp) + " (or at most " +
                      str(shape.pp) + ")");
}

std::optional<int> layer_index(const std::string& fqn, const std::string& blocks) {
  const std::string prefix = blocks + ".";
  if (fqn.rfind(prefix, 0) != 0 || fqn.size() == prefix.size()) return std::nullopt;
  for (size_t i = prefix.size(); i < fqn.size(); ++i)
    if (fqn[i] < '0' || fqn[i] > '9') return std::nullopt;
  return std::stoi(fqn.substr(prefix.size()));
}

}  // namespace

std::vector<int> PipelinePlan::stages_of_rank(int pp_rank) const {
  std::vector<int> stages;
  for (int s = pp_rank; s < shape.stages(); s += shape.pp) stages.push_back(s);
  return stages;
}

std::vector<std::vector<std::string>> split_modules(const models::PipelineLayout& layout, int n_layers, int stages,
                                                    int first_less, int last_less) {
  std::vector<std::vector<std::string>> parts(static_cast<size_t>(stages));
  if (stages == 1) {
    parts[0] = layout.modules(n_layers);
    return parts;
  }
  int next_layer = 0;
  auto take_layers = [&](std::vector<std::string>& part, int count) {
    for (int i = 0; i < count && next_layer < n_layers; ++i) part.push_back(layout.block(next_layer++));
  };
  const int slots = n_layers + first_less + last_less;
  for (int s = 0; s < stages; ++s) {
    auto& part = parts[static_cast<size_t>(s)];
    const int own_slots = slots / stages + (s < slots % stages ? 1 : 0);
    if (s == 0) {
      part = layout.before_blocks;
      take_layers(part, own_slots - first_less);
    } else if (s == stages - 1) {
      take_layers(part, own_slots - last_less);
      part.insert(part.end(), layout.after_blocks.begin(), layout.after_blocks.end());
    } else {
      take_layers(part, own_slots);
    }
  }
  return parts;
}

PipelinePlan plan_pipeline(const PipelinePlanInput& in) {
  const ScheduleKind kind = parse_schedule(in.schedule);
  if (in.layout.blocks.empty()) throw std::logic_error("plan_pipeline: the model's pipeline layout is empty");
  require_positive(in.n_layers, "model.n_layers");
  require_positive(in.pp, "parallelism.pipeline_parallel_degree");
  require_positive(in.local_batch_size, "training.local_batch_size");
  require_positive(in.microbatch_size, "parallelism.pipeline_parallel_microbatch_size");
  require_non_negative(in.first_stage_less_layers, "parallelism.pipeline_parallel_first_stage_less_layers");
  require_non_negative(in.last_stage_less_layers, "parallelism.pipeline_parallel_last_stage_less_layers");
  if (in.local_batch_size % in.microbatch_size != 0)
    throw ConfigError("parallelism.pipeline_parallel_microbatch_size " + str(in.microbatch_size) +
                      " does not divide training.local_batch_size " + str(in.local_batch_size));

  const int slots = in.n_layers + in.first_stage_less_layers + in.last_stage_less_layers;
  PipelinePlan plan{kind, PipeShape{in.pp, stages_per_rank(in, kind, slots), in.local_batch_size / in.microbatch_size},
                    {}, {}, {}};
  check_split(in, plan.shape.stages(), slots);
  check_microbatches(in, kind, plan.shape);
  plan.module_fqns_per_stage =
      in.module_fqns_per_model_part.empty()
          ? split_modules(in.layout, in.n_layers, plan.shape.stages(), in.first_stage_less_layers,
                          in.last_stage_less_layers)
          : in.module_fqns_per_model_part;

  // Backstop: the refusals above should leave only plans that run; a stuck one is a ctitan bug.
  plan.simulation = simulate(lower(compute_orders(kind, plan.shape), plan.shape), plan.shape);
  if (!plan.simulation.completed) {
    std::string stuck;
    for (size_t r = 0; r < plan.simulation.stuck.size(); ++r)
      if (!plan.simulation.stuck[r].empty()) stuck += " rank " + str(static_cast<int>(r)) + " at " + plan.simulation.stuck[r];
    throw std::logic_error(std::string("pipeline schedule ") + schedule_name(kind) + " with pp " + str(in.pp) + ", " +
                           str(plan.shape.stages()) + " stages and " + str(plan.shape.microbatches) +
                           " microbatches deadlocks in simulation:" + stuck);
  }
  if (kind != ScheduleKind::k1F1B && plan.shape.microbatches < plan.shape.stages()) {
    double worst = 0;
    for (double idle : plan.simulation.idle_share) worst = std::max(worst, idle);
    char share[32];
    std::snprintf(share, sizeof share, "%.0f%%", 100 * worst);
    plan.warning = std::string("pipeline: ") + schedule_name(kind) + " runs " + str(plan.shape.microbatches) +
                   " microbatches over " + str(plan.shape.stages()) + " stages, so a rank idles " + share +
                   " of each step (simulated, equal stages); more microbatches shrink the bubble";
  }
  return plan;
}

std::string describe_stage(const std::vector<std::string>& fqns, const std::string& blocks) {
  std::string text;
  auto append = [&](const std::string& item) { text += (text.empty() ? "" : ", ") + item; };
  for (size_t i = 0; i < fqns.size();) {
    std::optional<int> first = layer_index(fqns[i], blocks);
    if (!first) {
      append(fqns[i++]);
      continue;
    }
    // Extend the run while the next FQN is the next block.
    int last = *first;
    size_t j = i + 1;
    for (; j < fqns.size(); ++j) {
      std::optional<int> next = layer_index(fqns[j], blocks);
      if (!next || *next != last + 1) break;
      last = *next;
    }
    append(blocks + "." + str(*first) + (last > *first ? "-" + str(last) : ""));
    i = j;
  }
  return text;
}

}  // namespace ctitan::parallel::pipeline
