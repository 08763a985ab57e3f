// A deferred build (deferred_init.h) against the eager one it replaces: the same parameters and
// RNG stream, every initial value bit for bit (the eager build is the reference: init_weights on
// a whole model, as every earlier run of ctitan initialised), and no weights held while building.
#include "ctitan/models/common/deferred_init.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/models/model_spec.h"

namespace ctitan::models {
namespace {

ModelArgs small(const std::string& family, const std::string& flavor) {
  auto a = model_flavor(family, flavor);
  a.dim = 64; a.n_layers = 3; a.n_heads = 4; a.n_kv_heads = 2; a.vocab_size = 300; a.multiple_of = 16;
  a.max_seq_len = 16;
  if (a.qk_norm) a.explicit_head_dim = 32;  // Qwen3's head_dim apart from dim / n_heads
  return a;
}

std::vector<ModelArgs> families() {
  return {small("llama3", "debugmodel"), small("qwen3", "debugmodel"), small("qwen3", "0.6B") /* tied */};
}

TEST(DeferredInit, DrawsGiveAnEagerBuildsValuesBitForBitAndLeaveTheRngWhereItLeaves) {
  for (const auto& args : families()) {
    torch::manual_seed(11);
    Transformer eager(args);
    init_weights(*eager);
    const auto eager_rng = at::detail::getDefaultCPUGenerator().get_state();
    auto eager_params = eager->named_parameters();

    torch::manual_seed(11);
    auto deferred = build_deferred(args);
    for (const auto& p : deferred.model->named_parameters()) EXPECT_TRUE(is_deferred(p.value())) << p.key();
    ASSERT_EQ(deferred.draws.size(), eager_params.size()) << "one draw per parameter (a tied head has none)";
    for (const auto& d : deferred.draws) {
      auto whole = torch::empty(d.shape);
      d.draw(whole);
      ASSERT_TRUE(eager_params.contains(d.fqn)) << d.fqn;
      EXPECT_TRUE(torch::equal(whole, eager_params[d.fqn])) << d.fqn;
    }
    EXPECT_TRUE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), eager_rng))
        << "the RNG after the draws must stand where init_weights leaves it";
  }
}

// The counting allocator sees every CPU storage: while building, at most one parameter is alive
// (each module's weights go as soon as it is built). The slack covers libtorch's own small
// tensors (scalars of the init functions), far below any weight here.
TEST(DeferredInit, BuildingHoldsAtMostOneParameterAtATime) {
  metrics::install_memory_tracker();
  auto args = small("llama3", "debugmodel");
  args.n_layers = 6;
  int64_t largest = 0, whole = 0;
  {
    Transformer eager(args);
    for (const auto& p : eager->parameters()) {
      largest = std::max<int64_t>(largest, p.numel() * 4);
      whole += p.numel() * 4;
    }
  }
  const int64_t before = metrics::memory_stats().active_bytes;
  metrics::reset_peak_memory();
  auto deferred = build_deferred(args);
  const auto stats = metrics::memory_stats();
  EXPECT_LE(stats.peak_bytes - before, largest + 4096) << "whole model: " << whole << " bytes";
  EXPECT_LE(stats.active_bytes - before, 4096) << "no weight stays";
}

}  // namespace
}  // namespace ctitan::models
