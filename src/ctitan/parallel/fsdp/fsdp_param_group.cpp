#include "ctitan/parallel/fsdp/fsdp_param_group.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>

#include "ctitan/distributed/communicator.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/models/common/deferred_init.h"
#include "ctitan/parallel/fsdp/storage.h"

namespace ctitan::parallel::fsdp {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

using metrics::MemoryTag;
using metrics::MemoryTagScope;

// Runs after autograd accumulated a gathered parameter's gradient: that gradient is FSDP's until
// post_backward copies it for the reduction, so the memory tracker counts it as such.
struct TagUnshardedGrad : torch::autograd::PostAccumulateGradHook {
  void operator()(const torch::autograd::Variable& param) override {
    metrics::tag_storage(param.grad(), MemoryTag::kUnshardedGrads);
  }
};

}  // namespace

FSDPParamGroup::FSDPParamGroup(std::string name, std::vector<std::pair<std::string, torch::Tensor>> module_params,
                       MeshGroups groups, MixedPrecisionPolicy mp, bool reshard_after_forward)
    : name_(std::move(name)), groups_(std::move(groups)), mp_(mp), reshard_after_forward_(reshard_after_forward) {
  world_ = groups_.shard->size();
  rank_ = groups_.shard->rank();
  int64_t flat_numel = 0;
  for (auto& [fqn, p] : module_params) {
    TORCH_CHECK(p.dim() >= 1, "fully_shard: parameter ", fqn, " is 0-d; FSDP shards on dim 0");
    ShardedParam sp;
    sp.fqn = fqn;
    sp.module_param = p;
    sp.global_shape = p.sizes().vec();
    sp.rows = p.size(0);
    sp.row_numel = sp.rows > 0 ? p.numel() / sp.rows : 0;
    sp.padded_rows = (sp.rows + world_ - 1) / world_;
    sp.local_rows = sp.rows_on(rank_);
    sp.row_offset = std::min(rank_ * sp.padded_rows, sp.rows);
    sp.flat_offset = flat_numel;
    flat_numel += sp.padded_shard_numel();
    params_.push_back(std::move(sp));
  }
  // (S,) fp32: padding rows stay zero for the whole run.
  auto device = params_.empty() ? torch::Device(torch::kCPU) : params_.front().module_param.device();
  flat_shard_ = torch::zeros({flat_numel}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  torch::NoGradGuard no_grad;
  for (auto& sp : params_) {
    int64_t n = sp.local_rows * sp.row_numel;
    auto local = flat_shard_.narrow(0, sp.flat_offset, n);
    // A deferred parameter (deferred_init.h) has no values yet: its shard is written later.
    if (!models::is_deferred(sp.module_param)) {
      local.copy_(sp.module_param.reshape({-1}).narrow(0, sp.row_offset * sp.row_numel, n));
    }
    // The optimizer's parameter: a leaf sharing the flat shard's memory, so one all-gather reads
    // every parameter of the group after the optimizer updated them in place.
    sp.sharded = local.view(sp.local_shape()).detach().requires_grad_(true);
    // From here on the module parameter is an alias of `unsharded`, whose storage comes and goes.
    // Copies go into `unsharded`, never into the parameter, so the parameter's version counter
    // never moves and autograd accepts the values it saved as re-gathered ones.
    sp.unsharded = torch::empty(sp.global_shape, torch::TensorOptions().dtype(mp_.param_dtype).device(sp.module_param.device()));
    free_storage(sp.unsharded);
    sp.module_param.set_data(sp.unsharded);
    torch::autograd::impl::set_post_acc_grad_hooks(sp.module_param, std::make_unique<TagUnshardedGrad>());
  }
}

void FSDPParamGroup::unshard_async() {
  if (unsharded_ || gather_work_) return;
  torch::NoGradGuard no_grad;
  MemoryTagScope tag(MemoryTag::kCommBuffers);
  const int64_t S = flat_shard_.numel();
  gathered_ = torch::empty({world_ * S}, flat_shard_.options().dtype(mp_.param_dtype));
  // The input is this rank's slot of the output (FSDP2's in-place all-gather): the shard is cast
  // straight into it, so no (S,) param_dtype copy lives beside the buffer while the gather runs.
  auto input = gathered_.narrow(0, rank_ * S, S);
  input.copy_(flat_shard_);
  gather_work_ = groups_.shard->all_gather_into_tensor(gathered_, input, /*async_op=*/true);
}

double FSDPParamGroup::unshard() {
  if (unsharded_) return 0;
  unshard_async();
  auto start = std::chrono::steady_clock::now();
  gather_work_->wait();
  gather_work_.reset();
  double blocked = seconds_since(start);

  torch::NoGradGuard no_grad;
  MemoryTagScope tag(MemoryTag::kUnshardedParams);
  const int64_t S = flat_shard_.numel();
  for (auto& sp : params_) {
    // Copy-out: rank r's rows of this parameter sit at [r*S + flat_offset, ...) in the gathered buffer.
    allocate_storage(sp.unsharded);
    auto full_flat = sp.unsharded.view({-1});
    for (int64_t r = 0; r < world_; ++r) {
      int64_t n = sp.rows_on(r) * sp.row_numel;
      if (n == 0) continue;
      full_flat.narrow(0, r * sp.padded_rows * sp.row_numel, n).copy_(gathered_.narrow(0, r * S + sp.flat_offset, n));
    }
  }
  gathered_ = torch::Tensor();
  unsharded_ = true;
  return blocked;
}

void FSDPParamGroup::reshard() {
  if (gather_work_) {  // a prefetch nobody used: it was issued on every rank, so it must complete
    gather_work_->wait();
    gather_work_.reset();
    gathered_ = torch::Tensor();
  }
  if (!unsharded_) return;
  for (auto& sp : params_) free_storage(sp.unsharded);
  unsharded_ = false;
}

torch::Tensor FSDPParamGroup::gradients_into_reduce_buffer() const {
  const int64_t S = flat_shard_.numel();
  // (N * S,) reduce_dtype, laid out as the reduce-scatter wants it: rank r's shard of every
  // parameter at [r*S, (r+1)*S), padding rows zero.
  auto buffer = torch::empty({world_ * S}, flat_shard_.options().dtype(mp_.reduce_dtype));
  for (const auto& sp : params_) {
    auto grad = sp.module_param.grad();
    auto grad_flat = grad.defined() ? grad.reshape({-1}) : torch::Tensor();
    for (int64_t r = 0; r < world_; ++r) {
      auto slot = buffer.narrow(0, r * S + sp.flat_offset, sp.padded_shard_numel());
      int64_t n = sp.rows_on(r) * sp.row_numel;
      if (n > 0) {
        // An unused parameter has no gradient: it still takes part, with zeros.
        if (grad.defined()) slot.narrow(0, 0, n).copy_(grad_flat.narrow(0, r * sp.padded_rows * sp.row_numel, n));
        else slot.narrow(0, 0, n).zero_();
      }
      if (n < slot.numel()) slot.narrow(0, n, slot.numel() - n).zero_();
    }
  }
  return buffer;
}

void FSDPParamGroup::post_backward(bool sync) {
  torch::NoGradGuard no_grad;
  MemoryTagScope tag(MemoryTag::kCommBuffers);
  auto grads = gradients_into_reduce_buffer();
  for (auto& sp : params_) sp.module_param.mutable_grad() = torch::Tensor();  // the unsharded gradient is freed here
  if (unsynced_grads_.defined()) {
    unsynced_grads_.add_(grads);
    grads = std::move(unsynced_grads_);
    unsynced_grads_ = torch::Tensor();
  }
  if (!sync) {
    unsynced_grads_ = std::move(grads);
    metrics::tag_storage(unsynced_grads_, MemoryTag::kUnshardedGrads);
    return;
  }
  metrics::tag_storage(grads, MemoryTag::kCommBuffers);  // the accumulated sum, when there was one
  TORCH_CHECK(!reduce_work_, "FSDP group ", name_, ": a gradient reduction is already in flight");
  // The loss is already divided by the token count of the whole global batch, so the SUM over
  // ranks is the exact token-weighted mean: no division by N here.
  {
    // In fp32 and with no gradient yet, the output becomes the sharded gradient (finish_reduce):
    // model state, not a communication buffer. The scope still tags the collective's scratch.
    const bool becomes_grad =
        mp_.reduce_dtype == torch::kFloat && !params_.empty() && !params_.front().sharded.grad().defined();
    MemoryTagScope output_tag(becomes_grad ? MemoryTag::kNone : MemoryTag::kCommBuffers);
    reduced_ = torch::empty({flat_shard_.numel()}, grads.options());
  }
  reduce_work_ = groups_.shard->reduce_scatter_tensor(reduced_, grads, distributed::ReduceOp::kSum, /*async_op=*/true);
}

double FSDPParamGroup::finish_reduce() {
  if (!reduce_work_) return 0;
  auto start = std::chrono::steady_clock::now();
  reduce_work_->wait();
  reduce_work_.reset();
  // HSDP: the shard group reduced within each replica; the replicas then sum their shards.
  if (groups_.replicate) {
    MemoryTagScope tag(MemoryTag::kCommBuffers);
    groups_.replicate->all_reduce(reduced_, distributed::ReduceOp::kSum);
  }
  double blocked = seconds_since(start);

  torch::NoGradGuard no_grad;
  auto shard = reduced_.to(torch::kFloat);  // (S,) fp32; no copy when reduce_dtype is fp32
  reduced_ = torch::Tensor();
  for (auto& sp : params_) {
    auto grad = shard.narrow(0, sp.flat_offset, sp.local_rows * sp.row_numel).view(sp.local_shape());
    if (sp.sharded.grad().defined()) sp.sharded.mutable_grad().add_(grad);
    else sp.sharded.mutable_grad() = grad;
  }
  return blocked;
}

}  // namespace ctitan::parallel::fsdp
