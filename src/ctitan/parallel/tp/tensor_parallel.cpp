#include "ctitan/parallel/tp/tensor_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "ctitan/common/error.h"
#include "ctitan/models/common/deferred_init.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/parallel/deferred_params.h"
#include "ctitan/parallel/tp/collective_matmul.h"
#include "ctitan/parallel/tp/projection_stash.h"
#include "ctitan/parallel/tp/sequence_parallel.h"
#include "ctitan/parallel/tp/vocab_parallel_loss.h"

namespace ctitan::parallel::tp {

namespace {

// A block's child module named by the plan; a missing one is a plan that does not fit the model.
torch::nn::Module& child_of(torch::nn::Module& parent, const std::string& name, const std::string& where) {
  const auto children = parent.named_children();  // a copy of the handles; parent owns the modules
  auto* found = children.find(name);
  if (!found) throw std::logic_error(fmt::format("tensor parallel plan: {} has no module '{}'", where, name));
  return **found;
}

torch::nn::Linear linear_child(torch::nn::Module& parent, const std::string& name, const std::string& where) {
  const auto children = parent.named_children();
  auto* found = children.find(name);
  auto linear = found ? std::dynamic_pointer_cast<torch::nn::LinearImpl>(*found) : nullptr;
  if (!linear) throw std::logic_error(fmt::format("tensor parallel plan: {}.{} is not a Linear", where, name));
  return torch::nn::Linear(linear);
}

}  // namespace

ShardRange shard_range(int64_t n, int64_t parts, int64_t index) {
  const int64_t chunk = (n + parts - 1) / parts;
  return {std::min(index * chunk, n), std::clamp<int64_t>(n - index * chunk, 0, chunk)};
}

void validate_tensor_parallel(const models::ModelArgs& args, int64_t seq_len, int64_t tp) {
  if (tp <= 1) return;
  auto require_divisible = [tp](int64_t value, const std::string& what) {
    if (value % tp != 0) {
      throw ConfigError(fmt::format("{} {} is not divisible by parallelism.tensor_parallel_degree {}", what, value, tp));
    }
  };
  require_divisible(args.n_heads, "model.n_heads");
  require_divisible(args.kv_heads(), "model.n_kv_heads");
  require_divisible(args.dim, "model.dim");
  require_divisible(args.ffn_hidden_dim(), "the feed-forward width (model.hidden_dim, or the flavor's rule from model.dim)");
  require_divisible(seq_len, "training.seq_len (sequence parallel splits it)");
  const int64_t chunk = (args.vocab_size + tp - 1) / tp;
  if ((tp - 1) * chunk >= args.vocab_size) {
    throw ConfigError(fmt::format("model.vocab_size {} in parallelism.tensor_parallel_degree {} shards of {} rows "
                                  "leaves the last rank no rows", args.vocab_size, tp, chunk));
  }
}

TensorParallel::TensorParallel(models::TransformerImpl& model, std::shared_ptr<distributed::Communicator> group,
                               bool loss_parallel, bool async)
    : TensorParallel(std::vector<models::TransformerImpl*>{&model}, std::move(group), loss_parallel, async) {}

TensorParallel::TensorParallel(const std::vector<models::TransformerImpl*>& parts,
                               std::shared_ptr<distributed::Communicator> group, bool loss_parallel, bool async)
    : group_(std::move(group)), loss_parallel_(loss_parallel), async_(async) {
  if (parts.empty()) throw std::logic_error("TensorParallel: no model parts");
  vocab_ = shard_range(parts.front()->args().vocab_size, group_->size(), group_->rank());
  for (auto* part : parts) apply_plan(*part);
}

void TensorParallel::apply_plan(models::TransformerImpl& model) {
  const int64_t tp = group_->size(), rank = group_->rank();
  const auto& args = model.args();
  auto column_wise = [&](const std::string& fqn, torch::nn::Linear& linear) {  // weight (out, in): slice out
    slice(fqn, linear->weight, 0, shard_range(linear->weight.size(0), tp, rank));
  };
  auto row_wise = [&](const std::string& fqn, torch::nn::Linear& linear) {  // weight (out, in): slice in
    slice(fqn, linear->weight, 1, shard_range(linear->weight.size(1), tp, rank));
  };
  auto& hooks = model.hooks;
  distributed::Communicator* g = group_.get();

  // A pipeline stage holds only some of the model (parallel/pipeline/stage_model.h): each part
  // present is sliced and hooked, the rest is another stage's.
  if (model.tok_embeddings) {
    slice("tok_embeddings.weight", model.tok_embeddings->weight, 0, vocab_);
    // Each rank embeds the ids in its rows and zeros for the rest; the sum over ranks, taken by
    // the reduce-scatter, is the full embedding (exact: every other term is zero).
    hooks.set_around(*model.tok_embeddings, [vocab = vocab_](const torch::Tensor& ids, const auto& forward) {
      auto owned = (ids >= vocab.offset) & (ids < vocab.offset + vocab.size);  // (B, T)
      auto local_ids = torch::where(owned, ids - vocab.offset, torch::zeros_like(ids));
      return forward(local_ids).masked_fill(~owned.unsqueeze(-1), 0.0);  // (B, T, dim), partial
    });
    hooks.add_post_forward(*model.tok_embeddings, [g](const torch::Tensor& h) { return reduce_scatter_sequence(h, *g); });
  }

  // The family's plan (models/common/parallelize_plan.h) names the modules of a block.
  const auto plan = models::model_spec(args.family).parallelize_plan(args).tp;
  for (auto* block : model.blocks()) {
    const std::string prefix = fmt::format("layers.{}.", block->layer_id);
    const auto children = block->named_children();
    for (const auto& sub : plan.sublayers) {
      if (!children.contains(sub.module)) continue;  // a MoE layer has no feed_forward
      auto& module = child_of(*block, sub.module, prefix);
      std::vector<torch::nn::Linear> columns;
      for (const auto& name : sub.column_wise) {
        columns.push_back(linear_child(module, name, prefix + sub.module));
        column_wise(prefix + sub.module + "." + name + ".weight", columns.back());
      }
      auto row = linear_child(module, sub.row_wise, prefix + sub.module);
      row_wise(prefix + sub.module + "." + sub.row_wise + ".weight", row);
      hook_sublayer(hooks, module, columns, row);
    }
    // Whole on every tp rank, each rank's gradient one share of the full one, which the sum over
    // the group completes: norms act per token (QK-norms on whole heads, and each rank holds
    // whole heads) and a MoE layer routes each rank's own tokens through whole experts (a share
    // of the tokens); latent attention's latents run on the gathered sequence but feed every
    // head, and each rank backpropagates its own heads only (a share of the heads).
    const auto params = block->named_parameters();
    for (const auto& name : plan.replicated) {
      if (params.contains(name)) replicated_.insert(prefix + name);
    }
  }
  if (model.norm) replicated_.insert("norm.weight");
  auto* head = model.head();
  if (!head) return;
  // The head's rows are this rank's vocabulary, as the embedding's: a tied head reads the
  // embedding's slice (sliced above), an untied one is sliced here.
  if (model.output) slice("output.weight", model.output->weight, 0, vocab_);
  if (async_) {
    hooks.set_around(*head, [g, &model](const torch::Tensor& x, const auto&) {
      return all_gather_matmul(x, {model.head_weight()}, *g)[1];  // (B, T, V_r)
    });
  } else {
    hooks.add_pre_forward(*head, [g](const torch::Tensor& x) { return gather_sequence(x, *g); });
  }
  if (!loss_parallel_) {
    hooks.add_post_forward(*head, [g, vocab = args.vocab_size, chunk = (args.vocab_size + tp - 1) / tp](
                                      const torch::Tensor& logits) { return gather_vocab(logits, *g, vocab, chunk); });
  }
}

void TensorParallel::hook_sublayer(models::ModuleHooks& hooks, const torch::nn::Module& module,
                                   const std::vector<torch::nn::Linear>& column_wise, const torch::nn::Linear& row_wise) {
  distributed::Communicator* g = group_.get();
  if (!async_) {
    hooks.add_pre_forward(module, [g](const torch::Tensor& x) { return gather_sequence(x, *g); });
    hooks.add_post_forward(module, [g](const torch::Tensor& y) { return reduce_scatter_sequence(y, *g); });
    return;
  }
  // The module's input stays on the sequence shard until the fused call: it gathers it, computes
  // every column-wise projection and hands the module the gathered input (B, T, dim), whose
  // projections then take their outputs from the stash.
  auto stash = stashes_.emplace_back(std::make_shared<ProjectionStash>());
  hooks.add_pre_forward(module, [g, stash, column_wise](const torch::Tensor& x) {
    std::vector<torch::Tensor> weights;
    for (const auto& linear : column_wise) weights.push_back(linear->weight);
    auto outputs = all_gather_matmul(x, weights, *g);  // {x_full, y_1, ...}
    std::map<const torch::nn::Module*, torch::Tensor> by_projection;
    for (size_t i = 0; i < column_wise.size(); ++i) by_projection[column_wise[i].get()] = outputs[i + 1];
    stash->put(outputs[0], std::move(by_projection));
    return outputs[0];
  });
  for (const auto& linear : column_wise) {
    hooks.set_around(*linear, [stash, module = linear.get()](const torch::Tensor& x, const auto& forward) {
      auto y = stash->take(*module, x);
      return y ? *y : forward(x);
    });
  }
  hooks.set_around(*row_wise, [g, row_wise](const torch::Tensor& h, const auto&) {
    return matmul_reduce_scatter(h, row_wise->weight, *g);  // (B, T/tp, dim)
  });
  hooks.add_post_forward(module, [stash](const torch::Tensor& y) {
    stash->clear();
    return y;
  });
}

int64_t TensorParallel::unfused_projections() const {
  int64_t misses = 0;
  for (const auto& stash : stashes_) misses += stash->misses();
  return misses;
}

void TensorParallel::slice(const std::string& fqn, torch::Tensor param, int64_t dim, ShardRange range) {
  ShardLayout layout{param.sizes().vec(), std::vector<int64_t>(size_t(param.dim()), 0)};
  layout.offsets[size_t(dim)] = range.offset;
  layouts_[fqn] = layout;
  torch::NoGradGuard no_grad;
  if (models::is_deferred(param)) {  // no values yet (deferred_init.h): a slice without them
    auto sizes = param.sizes().vec();
    sizes[size_t(dim)] = range.size;
    param.set_data(deferred_tensor(sizes, param.options()));
    return;
  }
  // A copy, so the full tensor's memory is released: this rank keeps 1/tp of it.
  param.set_data(param.narrow(dim, range.offset, range.size).clone());
}

void TensorParallel::reduce_replicated_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& params) const {
  std::vector<torch::Tensor> grads;
  for (const auto& [fqn, p] : params) {
    if (replicated(fqn) && p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (const auto& g : grads) flat.push_back(g.reshape({-1}));
  auto buffer = torch::cat(flat);  // (sum of numels,): one collective for every norm weight
  group_->all_reduce(buffer, distributed::ReduceOp::kSum);
  int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(buffer.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

double TensorParallel::take_exposed_comm_seconds() {
  double total = 0;
  for (const auto& [op, stats] : group_->stats()) total += stats.seconds;
  double taken = total - reported_comm_seconds_;
  reported_comm_seconds_ = total;
  return taken;
}

torch::Tensor TensorParallel::vocab_parallel_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels,
                                                               int64_t ignore_index) const {
  return tp::vocab_parallel_cross_entropy_sum(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}),
                                              vocab_.offset, ignore_index, *group_);
}

ShardLayouts nest_layouts(const ShardLayouts& tp, const ShardLayouts& dp) {
  ShardLayouts out = tp;
  for (const auto& [key, inner] : dp) {
    auto outer = tp.find(key);
    if (outer == tp.end()) {
      out[key] = inner;
      continue;
    }
    ShardLayout nested{outer->second.global_shape, outer->second.full_offsets()};
    for (size_t d = 0; d < nested.offsets.size(); ++d) nested.offsets[d] += inner.offset(d);
    out[key] = nested;
  }
  return out;
}

}  // namespace ctitan::parallel::tp
