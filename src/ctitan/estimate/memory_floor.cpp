#include "ctitan/estimate/memory_floor.h"

#include <fmt/format.h>

#include <algorithm>

#include "ctitan/common/byte_units.h"
#include "ctitan/common/error.h"
#include "ctitan/models/common/flops.h"

namespace ctitan::estimate {
namespace {

double largest_activation(const JobShape& job, double tp) {
  const auto& m = job.model;
  const double widest = std::max({double(m.vocab_size), double(m.ffn_hidden_dim()), double(m.dim)});
  // Under PP a forward holds one pipeline microbatch, of one sequence at least.
  const double rows = job.degrees.pp > 1 ? 1 : double(job.local_batch_size);
  return rows * double(job.seq_len) * widest / tp * 2;
}

}  // namespace

MemoryFloor memory_floor(const JobShape& job) {
  const auto& g = job.degrees;
  MemoryFloor f;
  f.parameters = models::parameter_count(job.model);
  f.state_bytes = 16 * f.parameters / (double(g.dp_shard) * double(g.tp) * double(g.pp));
  f.largest_activation_bytes = largest_activation(job, double(g.tp));
  return f;
}

void refuse_beyond_memory(const MemoryFloor& floor, double memory_bytes, const std::string& memory) {
  if (floor.total() <= memory_bytes) return;
  throw ConfigError(fmt::format(
      "the step needs at least {:.4g} GiB per rank ({:.4g} parameters: {:.4g} GiB of weights, gradients and AdamW "
      "state per rank however they are sharded; one activation of {:.4g} GiB), more than {}, {:.4g} GiB: lower "
      "the model's sizes ([model]), training.local_batch_size or training.seq_len, or shard over more ranks",
      floor.total() / kGiB, floor.parameters, floor.state_bytes / kGiB, floor.largest_activation_bytes / kGiB, memory,
      memory_bytes / kGiB));
}

void refuse_beyond_the_walk(const JobShape& job) {
  // More than the walk's largest sums, unsharded: the model state, fp32 logits, every layer's
  // saved activations at 4 bytes per element (a block saves under 8 d + 4 hidden a token) and the
  // loaded batch.
  const auto& m = job.model;
  const double tokens = double(job.local_batch_size) * double(job.seq_len);
  const double d = double(m.dim), f = double(m.ffn_hidden_dim());
  const double unsharded = 16 * models::parameter_count(m) + 4 * tokens * (double(m.vocab_size) + f + d) +
                           4 * tokens * double(m.n_layers) * (8 * d + 4 * f) +
                           16 * tokens * double(job.grad_accum_steps);  // the global batch's ids and labels
  constexpr double kLimit = double(int64_t(1) << 60);
  if (unsharded <= kLimit) return;
  throw ConfigError(fmt::format("the job holds {:.4g} EiB before sharding, beyond the 1 EiB the estimate counts: "
                                "lower the model's sizes ([model]), training.local_batch_size or training.seq_len",
                                unsharded / kLimit));
}

}  // namespace ctitan::estimate
