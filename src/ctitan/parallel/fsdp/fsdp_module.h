#pragma once
// FSDP2-style fully sharded data parallelism, applied to a model from outside through its
// forward hooks (models/module_hooks.h). Each fully_shard() call makes one FSDPParamGroup of the
// given modules' parameters; the FSDPModule runs the schedule for all of them:
//
// forward, group i:   pre:  all-gather i (unless prefetched), wait and copy it out, prefetch i+1
//                     post: free i's unsharded parameters if it reshards after forward
// backward, group i:  pre  (the backward of i's output): gather i again, prefetch the group
//                                                        backward reaches next (i-1, or a
//                                                        nested experts group: set_backward_order)
//                     post (the backward of i's input):  complete the previous group's
//                                                        reduction, free i's parameters, copy
//                                                        i's gradients into the reduce buffer,
//                                                        free them, reduce-scatter
//
// Memory, as FSDP2: during group i's backward FSDP holds i's parameters and gradients, the
// prefetch of the next group in backward and the reduce-scatter of i+1 (its input until wait(), which overlaps it with
// i's compute). A prefetch is issued only after the group in use is copied out, and a group's
// parameters are freed before its reduce buffer is allocated, so neither moment adds a buffer.
// end of backward:    a callback runs the post-backward of groups whose input needs no grad
//                     (the embeddings), then waits for every reduction.
//
// Why each gradient is complete when its reduce-scatter starts: the post-backward of group i is
// the backward of an identity node wrapped around i's input. The engine runs that node only once
// the gradient with respect to i's input has been computed, which needs every op of i's forward
// to have run its backward; each of i's parameters' AccumulateGrad nodes is ready at the same
// time as those ops and, having the highest priority in the engine's ready queue, runs first.
// A parameter used outside its group would break this; the one that is, a tied embedding read by
// the head (models::TiedHead), has a group whose input is token ids: its post-backward waits for
// the end of backward, when both uses have accumulated (parallel/fsdp_plan.cpp keeps it unsharded).
//
// Collectives: every rank issues the same all-gathers and reduce-scatters in the same order,
// because the hooks fire in an order fixed by the model's structure, identical on every rank.
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/models/common/module_hooks.h"
#include "ctitan/parallel/data_parallel.h"
#include "ctitan/parallel/fsdp/fsdp_options.h"
#include "ctitan/parallel/fsdp/fsdp_param_group.h"

namespace ctitan::parallel::fsdp {

class FSDPModule final : public DataParallel {
 public:
  FSDPModule(models::ModuleHooks& hooks, MeshGroups groups, MixedPrecisionPolicy mp);
  ~FSDPModule() override;
  FSDPModule(const FSDPModule&) = delete;
  FSDPModule& operator=(const FSDPModule&) = delete;

  // One group from `modules` (FQN prefix, module), in forward order: gathered before the first
  // module's forward, released after the last's. Call in the order the model runs them.
  // Parameters under a `nested` prefix (a module sharded by a later call, run inside these) are
  // left to it. `groups`: this group's own mesh groups (routed experts under expert
  // parallelism), else the module's.
  void fully_shard(const std::vector<std::pair<std::string, const torch::nn::Module*>>& modules,
                   bool reshard_after_forward, const std::vector<std::string>& nested = {},
                   const std::optional<MeshGroups>& groups = std::nullopt);
  // The order in which backward reaches the groups' pre-backward hooks (group indices), when it
  // is not the reverse of the fully_shard calls: a nested group's backward runs inside its
  // parent's, right after the parent's begins. Each group's backward prefetches the next one.
  void set_backward_order(const std::vector<size_t>& order);
  // The root: after a forward without grad (evaluation) every group is resharded, so no
  // unsharded copy outlives an optimizer step.
  void fully_shard_root(const torch::nn::Module& root);

  // false: gradients accumulate unsharded (in reduce_dtype) across microbatches; true: the next
  // backward reduce-scatters them (with what has accumulated) into the sharded gradients.
  void set_requires_gradient_sync(bool sync) override { sync_ = sync; }
  // false: backward leaves the parameters unsharded for the next microbatch's backward.
  void set_reshard_after_backward(bool reshard) override { reshard_after_backward_ = reshard; }

  // The fp32 shards by FQN, in registration order: what the optimizer steps on.
  std::vector<std::pair<std::string, torch::Tensor>> sharded_parameters() const;
  std::vector<std::pair<std::string, torch::Tensor>> parameters_to_optimize() const override {
    return sharded_parameters();
  }
  // Where each shard sits in its global tensor.
  ShardLayouts shard_layouts() const override;
  // Seconds the training thread was blocked on FSDP collectives since the last call.
  double take_exposed_comm_seconds() override;
  double take_grad_sync_seconds() override;
  const MeshGroups& groups() const { return groups_; }
  // One per fully_shard call: the units gathered, freed and reduced together.
  size_t group_count() const { return param_groups_.size(); }

 private:
  friend struct BackwardHook;
  enum class Phase { kPreBackward, kPostBackward };

  torch::Tensor pre_forward(size_t i, const torch::Tensor& input);
  torch::Tensor post_forward(size_t i, const torch::Tensor& output);
  void on_backward(Phase phase, size_t i);
  void pre_backward(size_t i);
  void post_backward(size_t i);
  void finish_backward();
  void unshard_with_prefetch(size_t i, int64_t prefetch);

  models::ModuleHooks& hooks_;
  MeshGroups groups_;
  MixedPrecisionPolicy mp_;
  std::vector<std::unique_ptr<FSDPParamGroup>> param_groups_;
  std::vector<int64_t> backward_prefetch_;  // per group: the group its pre-backward prefetches, -1 none
  // Forwards with grad whose post-backward has not run yet: a pipeline stage runs several
  // microbatches' forwards before the first backward, and each backward owes each group one.
  std::vector<int> pending_post_backwards_;
  // Per backward pass: groups whose pre-backward / post-backward ran. The end-of-backward
  // callback runs the post-backward of groups whose input needs no grad (the embeddings): those
  // that began their backward in this pass but did not end it.
  std::vector<bool> began_backward_, ended_backward_;
  bool sync_ = true;
  bool reshard_after_backward_ = true;
  bool callback_queued_ = false;
  double exposed_seconds_ = 0;
  double grad_sync_seconds_ = 0;
};

}  // namespace ctitan::parallel::fsdp
