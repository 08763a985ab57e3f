// job_shape.h's functions: a block's parameters, FSDP's padded shard, the pipeline split.
#include "ctitan/estimate/job_shape.h"

namespace ctitan::estimate::detail {

std::vector<Weight> block_weights(const Widths& w) {
  std::vector<Weight> ws = {{w.hd, w.d, true},  {w.kv, w.d, true}, {w.kv, w.d, true}, {w.d, w.hd, true},  // wq wk wv wo
                            {w.f, w.d, true},   {w.d, w.f, true},  {w.f, w.d, true},                      // w1 w2 w3
                            {w.d, 1, false},    {w.d, 1, false}};                                        // the two norms
  if (w.qk_norm) ws.insert(ws.end(), {{w.head_dim, 1, false}, {w.head_dim, 1, false}});           // q_norm k_norm
  return ws;
}

int64_t numel(const std::vector<Weight>& ws, bool linear_only) {
  int64_t n = 0;
  for (const auto& w : ws) n += (!linear_only || w.linear) ? w.numel() : 0;
  return n;
}

int64_t padded_shard_numel(const std::vector<Weight>& ws, int64_t shards) {
  int64_t n = 0;
  for (const auto& w : ws) n += (w.rows + shards - 1) / shards * w.cols;
  return n;
}

std::vector<int64_t> stage_layers(int64_t layers, int64_t stages) {
  std::vector<int64_t> out(size_t(stages), 0);
  if (stages == 1) return {layers};
  const int64_t base = layers / stages;
  int64_t extra = layers % stages, at = 0;
  for (int64_t s = 0; s + 1 < stages; ++s) {
    const int64_t n = s == 0 ? base : base + (extra > 0 ? 1 : 0);
    if (s > 0 && extra > 0) --extra;
    out[size_t(s)] = n;
    at += n;
  }
  out.back() = layers - at;
  return out;
}

int64_t stages_per_rank(const JobShape& job) {
  return job.degrees.pp > 1 && job.pp_schedule == PipelineSchedule::kInterleaved1F1B ? 2 : 1;
}
int64_t pp_microbatches(const JobShape& job) {
  if (job.degrees.pp == 1) return 1;
  return job.pp_microbatches > 0 ? job.pp_microbatches : job.degrees.pp;
}

}  // namespace ctitan::estimate::detail
