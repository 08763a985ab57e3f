// The family's parallelize plan drives FSDP and activation checkpointing: every family's plan
// names modules its model has and covers every parameter once, and apply_fsdp and
// apply_activation_checkpointing follow whatever plan they are given (a different grouping
// gives different groups; a plan that misses a parameter is refused before anything is sharded).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "ctitan/distributed/communicator.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/parallel/activation_checkpoint.h"
#include "ctitan/parallel/fsdp_plan.h"
#include "support/thread_ranks.h"

namespace ctitan::parallel {
namespace {

// Each registered flavor small enough to build, with few weights but the flavor's features
// (QK-norm, tying, head width).
std::vector<std::pair<std::string, models::ModelArgs>> small_flavors() {
  std::vector<std::pair<std::string, models::ModelArgs>> out;
  for (const auto& spec : models::model_specs()) {
    for (const auto& [flavor, args] : spec.flavors) {
      if (flavor != "debugmodel" && flavor != "0.6B") continue;
      auto small = args;
      small.n_layers = 3;
      small.vocab_size = 256;
      out.emplace_back(spec.name + " " + flavor, small);
    }
  }
  return out;
}

// The prefixes of `param` (at a dot) that are among `modules`: its units' modules.
std::vector<std::string> unit_modules_of(const std::string& param, const std::set<std::string>& modules) {
  std::vector<std::string> out;
  for (size_t dot = param.find('.'); dot != std::string::npos; dot = param.find('.', dot + 1)) {
    if (modules.count(param.substr(0, dot))) out.push_back(param.substr(0, dot));
  }
  return out;
}

TEST(ParallelizePlan, EveryFamilysPlanNamesItsModulesAndCoversEveryParameterOnce) {
  for (const auto& [name, args] : small_flavors()) {
    models::Transformer model(args);
    const auto plan = models::model_spec(args.family).parallelize_plan(args);
    const auto modules = model->named_modules("", /*include_self=*/false);
    std::set<std::string> unit_modules;
    for (const auto& unit : plan.fsdp_units) {
      ASSERT_FALSE(unit.modules.empty()) << name;
      for (const auto& fqn : unit.modules) {
        EXPECT_TRUE(modules.contains(fqn)) << name << ": FSDP unit module " << fqn;
        EXPECT_TRUE(unit_modules.insert(fqn).second) << name << ": " << fqn << " in two units";
      }
    }
    // Every parameter in one unit, or in an experts unit nested in its block's: none left out,
    // and nothing else nested.
    std::set<std::string> expert_modules;
    for (const auto& unit : plan.fsdp_units) {
      if (unit.experts) expert_modules.insert(unit.modules.begin(), unit.modules.end());
    }
    for (const auto& param : model->named_parameters()) {
      const auto units = unit_modules_of(param.key(), unit_modules);
      const bool in_experts = !units.empty() && expert_modules.count(units.back());
      EXPECT_EQ(units.size(), in_experts ? 2u : 1u) << name << ": " << param.key();
    }
    // Checkpointed regions are the blocks, in forward order.
    std::vector<std::string> blocks;
    for (auto* block : model->blocks()) blocks.push_back(plan.pipeline.block(block->layer_id));
    EXPECT_EQ(plan.checkpoint_units, blocks) << name;
    // The pipeline layout's names are the model's modules in forward order; a tied head keeps
    // its slot without a module (PP refuses tied flavors).
    for (const auto& fqn : plan.pipeline.modules(args.n_layers)) {
      const bool tied_slot = fqn == "output" && args.tie_word_embeddings;
      EXPECT_TRUE(modules.contains(fqn) || tied_slot) << name << ": pipeline module " << fqn;
    }
    // FSDP units follow forward order: their modules appear in the layout's order (an experts
    // unit runs inside its block, right after the block's unit).
    const auto order = plan.pipeline.modules(args.n_layers);
    size_t at = 0;
    for (const auto& unit : plan.fsdp_units) {
      if (unit.experts) continue;
      for (const auto& fqn : unit.modules) {
        while (at < order.size() && order[at] != fqn) ++at;
        EXPECT_LT(at, order.size()) << name << ": FSDP unit module " << fqn << " out of forward order";
      }
    }
  }
}

models::ModelArgs tiny_args() {
  models::ModelArgs args;
  args.dim = 32;
  args.n_layers = 4;
  args.n_heads = 2;
  args.vocab_size = 16;
  args.max_seq_len = 8;
  return args;
}

std::shared_ptr<distributed::Communicator> one_rank_group() {
  return distributed::Communicator::create(testing::in_memory_store(), "dp", 0, 1, std::chrono::seconds(60),
                                           "127.0.0.1");
}

TEST(ParallelizePlan, FsdpMakesOneGroupPerUnitOfThePlan) {
  const auto args = tiny_args();
  auto group = one_rank_group();
  auto plan = models::decoder_plan(args);
  {
    models::Transformer model(args);
    auto fsdp = apply_fsdp(*model, plan.fsdp_units, {group, nullptr}, {}, config::ReshardAfterForward::kDefault);
    EXPECT_EQ(fsdp->group_count(), size_t(1 + args.n_layers + 1));  // tok_embeddings, each block, [norm, output]
  }
  // Blocks paired: two per unit.
  std::vector<models::FsdpUnit> paired{plan.fsdp_units.front()};
  for (int64_t i = 0; i < args.n_layers; i += 2) paired.push_back({{plan.pipeline.block(i), plan.pipeline.block(i + 1)}});
  paired.push_back(plan.fsdp_units.back());
  models::Transformer model(args);
  auto fsdp = apply_fsdp(*model, paired, {group, nullptr}, {}, config::ReshardAfterForward::kDefault);
  EXPECT_EQ(fsdp->group_count(), size_t(1 + args.n_layers / 2 + 1));
  // And it trains: forward and backward through the paired groups give every shard a gradient.
  auto tokens = torch::arange(16, torch::kLong).remainder(args.vocab_size).view({2, 8});  // (B, T)
  model->forward(tokens).pow(2).mean().backward();
  for (const auto& [fqn, shard] : fsdp->sharded_parameters()) EXPECT_TRUE(shard.grad().defined()) << fqn;
}

// Each parameter's storage: FSDP shards in place (its unsharded storage is freed after the copy),
// so an unchanged storage pointer and size mean nothing was sharded.
std::map<std::string, std::pair<const void*, size_t>> storages(const models::Transformer& model) {
  std::map<std::string, std::pair<const void*, size_t>> out;
  for (const auto& p : model->named_parameters()) {
    out[p.key()] = {p.value().storage().data(), p.value().storage().nbytes()};
  }
  return out;
}

TEST(ParallelizePlan, FsdpRefusesAPlanThatMissesAParameterOrNestsAUnitBeforeSharding) {
  const auto args = tiny_args();
  auto missing = models::decoder_plan(args);
  missing.fsdp_units.erase(missing.fsdp_units.begin() + 2);  // layers.1
  auto nested = models::decoder_plan(args);
  nested.fsdp_units.insert(nested.fsdp_units.begin() + 2, {{"layers.0.attention"}});  // inside layers.0's unit
  for (const auto& [plan, needle] : {std::pair{missing, "layers.1.attention.wq.weight is in no unit"},
                                     std::pair{nested, "unit layers.0.attention is nested in layers.0"}}) {
    models::Transformer model(args);
    const auto before = storages(model);
    try {
      apply_fsdp(*model, plan.fsdp_units, {one_rank_group(), nullptr}, {}, config::ReshardAfterForward::kDefault);
      ADD_FAILURE() << "applied a plan where " << needle;
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(storages(model), before) << needle;
  }
  // The control: applying the whole plan does change the storages.
  models::Transformer model(args);
  const auto before = storages(model);
  auto fsdp = apply_fsdp(*model, models::decoder_plan(args).fsdp_units, {one_rank_group(), nullptr}, {},
                         config::ReshardAfterForward::kDefault);
  EXPECT_NE(storages(model), before);
}

// A unit nested in another (a MoE layer's experts in its block) owns its parameters: each
// parameter is sharded once, the experts in groups of their own, after their block's.
TEST(ParallelizePlan, NestedExpertsUnitOwnsItsParameters) {
  auto args = models::model_flavor("qwen3_moe", "debugmodel");
  args.dim = 32; args.n_layers = 2; args.n_heads = 2; args.n_kv_heads = 1; args.explicit_head_dim = 16;
  args.vocab_size = 64; args.moe.hidden_dim = 8;
  models::Transformer model(args);
  auto fsdp = apply_fsdp(*model, models::decoder_plan(args).fsdp_units, {one_rank_group(), nullptr}, {},
                         config::ReshardAfterForward::kDefault);
  EXPECT_EQ(fsdp->group_count(), size_t(1 + 2 * 2 + 1));  // embeddings, (block, experts) x 2, head
  std::map<std::string, int> seen;
  for (const auto& [fqn, shard] : fsdp->sharded_parameters()) ++seen[fqn];
  EXPECT_EQ(seen.size(), model->named_parameters().size());
  for (const auto& [fqn, n] : seen) EXPECT_EQ(n, 1) << fqn;
  EXPECT_TRUE(seen.count("layers.1.moe.experts.w2"));
}

TEST(ActivationCheckpoint, WrapsTheUnitsThePlanNames) {
  const auto args = tiny_args();
  const config::ActivationCheckpoint full{config::ActivationCheckpointMode::kFull, ""};
  models::Transformer model(args);
  EXPECT_EQ(apply_activation_checkpointing(*model, {"layers.1", "layers.3", "layers.9"}, full), 2);  // 9: not here
  models::Transformer all(args);
  EXPECT_EQ(apply_activation_checkpointing(*all, models::decoder_plan(args).checkpoint_units, full), 4);
}

}  // namespace
}  // namespace ctitan::parallel
