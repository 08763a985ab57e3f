// Tensor parallelism's pieces on 2 thread ranks (a Gloo group over an in-memory store), each
// against the one-process computation: the sequence-parallel collectives and their backwards,
// the vocab-parallel cross-entropy against torch's, and a whole TP(2) model's loss and every
// gradient against the unsharded model's.
#include <gtest/gtest.h>

#include <mutex>

#include "ctitan/common/error.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/ops/cross_entropy.h"
#include "ctitan/parallel/tp/collective_matmul.h"
#include "ctitan/parallel/tp/sequence_parallel.h"
#include "ctitan/parallel/tp/tensor_parallel.h"
#include "ctitan/parallel/tp/vocab_parallel_loss.h"
#include "support/thread_ranks.h"

namespace ctitan::parallel::tp {
namespace {

constexpr int kRanks = 2;
constexpr auto kTpConnectTimeout = std::chrono::seconds(60);

// Runs body(group) on kRanks thread ranks of one group; "" when every rank returned normally.
std::string on_tp_ranks(const std::function<void(distributed::Communicator&)>& body) {
  auto store = testing::in_memory_store();
  return testing::rank_errors(testing::on_thread_ranks(kRanks, [&](int rank) {
    auto group = distributed::Communicator::create(store, "tp", rank, kRanks, kTpConnectTimeout, "127.0.0.1");
    body(*group);
  }));
}

// Largest |a - b| relative to the largest |b|: one number per tensor.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
}

TEST(TensorParallel, ShardRangeGivesCeilChunksAndAShorterLast) {
  EXPECT_EQ(shard_range(33, 2, 0).offset, 0);
  EXPECT_EQ(shard_range(33, 2, 0).size, 17);
  EXPECT_EQ(shard_range(33, 2, 1).offset, 17);
  EXPECT_EQ(shard_range(33, 2, 1).size, 16);
  EXPECT_EQ(shard_range(64, 4, 3).offset, 48);
  EXPECT_EQ(shard_range(64, 4, 3).size, 16);
}

// Every refusal names the key and both numbers (torchtitan went a year without the n_kv_heads one).
TEST(TensorParallel, ValidationNamesTheKeyAndTheNumbers) {
  models::ModelArgs args;
  args.dim = 64;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 32;
  args.multiple_of = 32;
  auto message = [&](int64_t seq_len, int64_t tp) -> std::string {
    try {
      validate_tensor_parallel(args, seq_len, tp);
    } catch (const ConfigError& e) {
      std::string what = e.what();
      EXPECT_EQ(what.rfind("config error: ", 0), 0u) << what;
      return what.substr(std::string("config error: ").size());
    }
    return "";
  };
  EXPECT_EQ(message(32, 2), "");
  EXPECT_EQ(message(32, 4), "model.n_kv_heads 2 is not divisible by parallelism.tensor_parallel_degree 4");
  EXPECT_EQ(message(30, 4).substr(0, 15), "model.n_kv_head");
  args.n_kv_heads = 4;
  EXPECT_EQ(message(30, 4), "training.seq_len (sequence parallel splits it) 30 is not divisible by "
                            "parallelism.tensor_parallel_degree 4");
  args.n_heads = 8;
  args.dim = 64;
  EXPECT_EQ(message(32, 8).substr(0, 26), "model.n_kv_heads 4 is not ");
  args.n_heads = 3;
  args.n_kv_heads = 0;
  args.dim = 48;
  EXPECT_EQ(message(32, 2), "model.n_heads 3 is not divisible by parallelism.tensor_parallel_degree 2");
  args = {};
  args.dim = 64;
  args.n_heads = 4;
  args.vocab_size = 4;
  args.multiple_of = 32;
  EXPECT_EQ(message(32, 4), "");  // 1 + 1 + 1 + 1 rows
  args.vocab_size = 5;
  EXPECT_EQ(message(32, 4), "model.vocab_size 5 in parallelism.tensor_parallel_degree 4 shards of 2 rows leaves "
                            "the last rank no rows");
}

// gather_sequence: each rank's (B, T/2, D) lands at its rows; the backward of a full-sequence
// gradient that differs per rank is the sum over ranks of this rank's rows. reduce_scatter is
// the mirror. Values are small integers, so sums are exact and the checks are equalities.
TEST(TensorParallel, SequenceCollectivesAndTheirBackwards) {
  auto value = [](int rank, int salt) {  // (2, 4, 3)
    return torch::arange(24, torch::kFloat).reshape({2, 4, 3}) * (rank + 1) + salt;
  };
  EXPECT_EQ(on_tp_ranks([&](distributed::Communicator& group) {
    const int rank = group.rank();
    auto local = value(rank, 0).narrow(1, 2 * rank, 2).clone().requires_grad_(true);  // (2, 2, 3)
    auto full = gather_sequence(local, group);
    auto expected_full = torch::cat({value(0, 0).narrow(1, 0, 2), value(1, 0).narrow(1, 2, 2)}, 1);
    if (!torch::equal(full, expected_full)) throw std::runtime_error("gather_sequence forward");
    full.backward(value(rank, 5));
    auto expected_grad = (value(0, 5) + value(1, 5)).narrow(1, 2 * rank, 2);
    if (!torch::equal(local.grad(), expected_grad)) throw std::runtime_error("gather_sequence backward");

    auto partial = value(rank, 1).requires_grad_(true);  // (2, 4, 3) partial sums
    auto scattered = reduce_scatter_sequence(partial, group);
    if (!torch::equal(scattered, (value(0, 1) + value(1, 1)).narrow(1, 2 * rank, 2))) {
      throw std::runtime_error("reduce_scatter_sequence forward");
    }
    scattered.backward(value(rank, 2).narrow(1, 0, 2) * 1.0);
    auto expected = torch::cat({value(0, 2).narrow(1, 0, 2), value(1, 2).narrow(1, 0, 2)}, 1);
    if (!torch::equal(partial.grad(), expected)) throw std::runtime_error("reduce_scatter_sequence backward");
  }), "");
}

// Async TP's fused collective matmuls against the unfused collectives followed (or preceded) by
// plain matmuls, forward and backward, with a gradient reaching the gathered input too. Integer
// values in [-3, 3] keep every product and sum exact in fp32, so the checks are equalities. A
// shard of 3 rows splits into chunks of 2 and 1: uneven chunks must land at their rows.
TEST(TensorParallel, CollectiveMatmulsEqualTheUnfusedCollectives) {
  auto ints = [](std::vector<int64_t> shape, int salt) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return (torch::remainder(torch::arange(n, torch::kFloat) * 5 + salt, 7) - 3).reshape(shape);
  };
  auto leaf = [](const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); };
  auto same = [](const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
    if (!torch::equal(a, b)) throw std::runtime_error(what + " differs");
  };
  EXPECT_EQ(on_tp_ranks([&](distributed::Communicator& group) {
    const int rank = group.rank();
    auto x = leaf(ints({2, 3, 4}, 1 + rank)), w1 = leaf(ints({5, 4}, 2)), w2 = leaf(ints({6, 4}, 3));
    auto outs = all_gather_matmul(x, {w1, w2}, group);  // {x_full (2, 6, 4), (2, 6, 5), (2, 6, 6)}
    auto x_ref = leaf(x), w1_ref = leaf(w1), w2_ref = leaf(w2);
    auto full = gather_sequence(x_ref, group);
    auto y1 = torch::matmul(full, w1_ref.t()), y2 = torch::matmul(full, w2_ref.t());
    same(outs[0], full, "gathered input");
    same(outs[1], y1, "first projection");
    same(outs[2], y2, "second projection");
    std::vector<torch::Tensor> grads{ints({2, 6, 4}, 4 + rank), ints({2, 6, 5}, 5 + rank), ints({2, 6, 6}, 6 + rank)};
    torch::autograd::backward(outs, grads);
    torch::autograd::backward({full, y1, y2}, grads);
    same(x.grad(), x_ref.grad(), "input gradient");
    same(w1.grad(), w1_ref.grad(), "first weight gradient");
    same(w2.grad(), w2_ref.grad(), "second weight gradient");

    auto h = leaf(ints({2, 6, 5}, 7 + rank)), w = leaf(ints({4, 5}, 8));
    auto y = matmul_reduce_scatter(h, w, group);  // (2, 3, 4)
    auto h_ref = leaf(h), w_ref = leaf(w);
    auto y_ref = reduce_scatter_sequence(torch::matmul(h_ref, w_ref.t()), group);
    same(y, y_ref, "reduce-scattered projection");
    auto g = ints({2, 3, 4}, 9 + rank);
    y.backward(g);
    y_ref.backward(g);
    same(h.grad(), h_ref.grad(), "row-wise input gradient");
    same(w.grad(), w_ref.grad(), "row-wise weight gradient");
  }), "");
}

// The vocab-parallel loss against torch's cross_entropy on the whole logits (33 columns: rank 0
// holds 17, rank 1 16), with ignored labels and labels on both ranks. fp32: the two differ only
// in the order the exponentials are summed (two partial sums added vs one pass), ~1e-7
// relative; 1e-5 leaves margin while a missing max shift or a target taken twice is off by O(1).
TEST(TensorParallel, VocabParallelCrossEntropyEqualsTorchsAndItsGradient) {
  torch::manual_seed(3);
  auto logits = torch::randn({10, 33}) * 4;
  auto labels = torch::randint(0, 33, {10}, torch::kLong);
  labels[2] = -100;
  labels[7] = -100;
  auto full = logits.clone().requires_grad_(true);
  auto reference = ops::cross_entropy_sum_reference(full, labels, -100);
  reference.backward();
  EXPECT_EQ(on_tp_ranks([&](distributed::Communicator& group) {
    auto range = shard_range(33, kRanks, group.rank());
    auto local = logits.narrow(1, range.offset, range.size).clone().requires_grad_(true);
    auto loss = vocab_parallel_cross_entropy_sum(local, labels, range.offset, -100, group);
    if (relative_error(loss, reference) > 1e-5) throw std::runtime_error("loss differs");
    loss.backward();
    if (relative_error(local.grad(), full.grad().narrow(1, range.offset, range.size)) > 1e-5) {
      throw std::runtime_error("gradient differs");
    }
  }), "");
}

models::ModelArgs tp_tiny_args() {
  models::ModelArgs args;
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;  // GQA: each rank gets 2 query heads sharing 1 kv head
  args.vocab_size = 33;  // uneven: 17 + 16 rows
  args.multiple_of = 32;
  args.max_seq_len = 16;
  return args;
}

// A whole TP(2) model (loss parallel, and gathered logits; synchronous and async TP) against the
// same weights unsharded: the loss, and every gradient placed by shard_layouts() into its global
// tensor. fp32: TP only reorders sums (row-wise partial products, the reduce-scatters; async TP
// also chunked matmuls and the three input gradients of q, k, v summed in another order), ~1e-6
// relative; 1e-4 leaves margin for the norms' gradient, summed over ranks from sequence halves,
// while a norm gradient not summed over tp (a classic TP bug) is off by ~50% and fails. Async TP
// must also have fused every column-wise projection (none ran its plain forward).
TEST(TensorParallel, Tp2ModelLossAndGradientsEqualTheUnshardedModel) {
  auto args = tp_tiny_args();
  torch::manual_seed(11);
  models::Transformer reference(args);
  models::init_weights(*reference);
  auto tokens = torch::randint(0, 33, {2, 16}, torch::kLong);
  auto labels = torch::randint(0, 33, {2, 16}, torch::kLong);
  auto reference_loss = ops::cross_entropy_sum_reference(reference->forward(tokens).reshape({-1, 33}),
                                                         labels.reshape({-1}), -100);
  reference_loss.backward();
  std::map<std::string, torch::Tensor> reference_grads;
  for (const auto& p : reference->named_parameters()) reference_grads[p.key()] = p.value().grad();

  for (auto [loss_parallel, async] : {std::pair{true, false}, {false, false}, {true, true}, {false, true}}) {
    std::mutex build;  // model construction draws from the global generator
    EXPECT_EQ(on_tp_ranks([&](distributed::Communicator& group) {
      models::Transformer model{nullptr};
      {
        std::lock_guard<std::mutex> lock(build);
        model = models::Transformer(args);
        torch::NoGradGuard no_grad;
        auto source = reference->named_parameters();
        for (auto& p : model->named_parameters()) p.value().copy_(source[p.key()]);
      }
      std::shared_ptr<distributed::Communicator> borrowed(&group, [](distributed::Communicator*) {});
      TensorParallel tp(*model, borrowed, loss_parallel, async);
      auto logits = model->forward(tokens);  // (2, 16, 17 or 16) or (2, 16, 33)
      auto loss = loss_parallel ? tp.vocab_parallel_cross_entropy_sum(logits, labels, -100)
                                : ops::cross_entropy_sum_reference(logits.reshape({-1, 33}), labels.reshape({-1}), -100);
      if (relative_error(loss, reference_loss) > 1e-5) throw std::runtime_error("loss differs");
      loss.backward();
      std::vector<std::pair<std::string, torch::Tensor>> named;
      for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
      tp.reduce_replicated_gradients(named);
      for (const auto& [fqn, p] : named) {
        auto expected = reference_grads.at(fqn);
        auto layout = tp.shard_layouts().find(fqn);
        if (layout != tp.shard_layouts().end()) {
          if (layout->second.global_shape != expected.sizes().vec()) throw std::runtime_error(fqn + ": global shape");
          for (int64_t d = 0; d < p.dim(); ++d) expected = expected.narrow(d, layout->second.offset(size_t(d)), p.size(d));
        } else if (!tp.replicated(fqn)) {
          throw std::runtime_error(fqn + " is neither sliced nor replicated");
        }
        double error = relative_error(p.grad(), expected);
        if (error > 1e-4) throw std::runtime_error(fmt::format("{}: gradient off by {:.3g}", fqn, error));
      }
      if (tp.unfused_projections() != 0) throw std::runtime_error("async TP ran a projection unfused");
    }), "") << (loss_parallel ? "loss parallel" : "gathered logits") << (async ? ", async" : "");
  }
}

// FSDP's rows of a TP slice sit inside the slice: offsets add, the global shape is TP's.
TEST(TensorParallel, NestedLayoutsAddOffsets) {
  ShardLayouts tp{{"wo", {{8, 6}, {0, 3}}}, {"wq", {{6, 8}, {3, 0}}}};
  ShardLayouts dp{{"wo", {{8, 3}, {4}}}, {"wq", {{3, 8}, {2}}}, {"norm", {{8}, {4}}}};
  auto nested = nest_layouts(tp, dp);
  EXPECT_EQ(nested.at("wo").global_shape, (std::vector<int64_t>{8, 6}));
  EXPECT_EQ(nested.at("wo").offsets, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(nested.at("wq").offsets, (std::vector<int64_t>{5, 0}));
  EXPECT_EQ(nested.at("norm").offsets, (std::vector<int64_t>{4}));
}

}  // namespace
}  // namespace ctitan::parallel::tp
