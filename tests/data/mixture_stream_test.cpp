// Weighted mixtures: the draw follows the weights, is a function of the seed alone, resumes
// exactly from its state (sources that wrapped around included), gives the loader the same
// windows for any data-parallel degree, and a source with nothing to give is one line naming it.
#include <gtest/gtest.h>

#include <cmath>

#include "ctitan/common/error.h"
#include "ctitan/data/mixture_stream.h"
#include "ctitan/data/packed_loader.h"

namespace ctitan::data::mixture_stream_test {
namespace {

// A source of `n` chunks; chunk i of source s is {s * 1000 + i} repeated `length(i)` times, so
// that every chunk says where it came from. Position = chunk index, as a document stream's is.
class FakeSource : public TokenStream {
 public:
  FakeSource(int id, int n) : id_(id), n_(n) {}
  std::optional<std::vector<int32_t>> next() override {
    if (position_ >= n_) return std::nullopt;
    const int64_t i = position_++;
    return std::vector<int32_t>(size_t(1 + i % 5), int32_t(id_ * 1000 + i));
  }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }

 private:
  int id_, n_;
  int64_t position_ = 0;
};

// Source i reads "dataset <ids[i]>" (by default, i).
std::unique_ptr<MixtureStream> fake_mixture(const std::vector<std::pair<int, double>>& sizes_and_weights, uint64_t seed,
                                            std::vector<int> ids = {}) {
  std::vector<MixtureSource> sources;
  for (size_t i = 0; i < sizes_and_weights.size(); ++i) {
    const int id = ids.empty() ? int(i) : ids[i];
    sources.push_back({"s" + std::to_string(i), "training.datasets[" + std::to_string(i) + "] 'x'",
                       "dataset " + std::to_string(id), std::make_unique<FakeSource>(int(i), sizes_and_weights[i].first),
                       sizes_and_weights[i].second});
  }
  return std::make_unique<MixtureStream>(std::move(sources), seed);
}

// Each draw picks source i with probability p_i independently, so its count over N draws is
// binomial: 5 standard deviations bound the deviation of the share by 5 * sqrt(p (1 - p) / N)
// (a false failure about once in 1.7 million), while swapping two weights moves a share by > 0.1.
TEST(MixtureStream, ProportionsFollowTheWeights) {
  constexpr int64_t kDraws = 60000;
  const std::vector<double> weights = {1, 2, 5};
  auto m = fake_mixture({{10, 1}, {1000, 2}, {3, 5}}, 7);  // sizes far from the weights: wrap-arounds
  std::vector<int64_t> draws(3, 0), tokens(3, 0);
  for (int64_t i = 0; i < kDraws; ++i) {
    auto chunk = m->next();
    ASSERT_TRUE(chunk);
    const int source = chunk->front() / 1000;
    ++draws[size_t(source)];
    tokens[size_t(source)] += int64_t(chunk->size());
  }
  for (size_t i = 0; i < 3; ++i) {
    const double p = weights[i] / 8, share = double(draws[i]) / kDraws;
    EXPECT_NEAR(share, p, 5 * std::sqrt(p * (1 - p) / kDraws)) << "source " << i;
    EXPECT_EQ(m->source_tokens()[i], std::make_pair("s" + std::to_string(i), tokens[i]));
  }
}

TEST(MixtureStream, TheSeedAloneDecidesTheStream) {
  auto a = fake_mixture({{50, 1}, {50, 1}}, 3), b = fake_mixture({{50, 1}, {50, 1}}, 3), c = fake_mixture({{50, 1}, {50, 1}}, 4);
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    auto x = a->next(), y = b->next(), z = c->next();
    EXPECT_EQ(x, y) << i;
    differ += x != z;
  }
  EXPECT_GT(differ, 50) << "another seed should give another order";
}

TEST(MixtureStream, ResumesExactlyFromItsStateAfterSourcesWrapped) {
  auto reference = fake_mixture({{4, 1}, {9, 3}, {30, 2}}, 11);
  std::vector<std::vector<int32_t>> chunks;
  for (int i = 0; i < 600; ++i) chunks.push_back(*reference->next());
  for (int cut : {0, 1, 17, 137, 401}) {
    auto first = fake_mixture({{4, 1}, {9, 3}, {30, 2}}, 11);
    for (int i = 0; i < cut; ++i) first->next();
    auto state = first->state_dict();
    auto resumed = fake_mixture({{4, 1}, {9, 3}, {30, 2}}, 11);
    resumed->load_state_dict(state);
    EXPECT_EQ(resumed->source_tokens(), first->source_tokens());
    for (int i = cut; i < cut + 150; ++i) ASSERT_EQ(*resumed->next(), chunks[size_t(i)]) << "cut " << cut << " draw " << i;
  }
  // Wrapped: source 0 has 4 chunks and about 1/6 of 600 draws.
  EXPECT_GT(reference->state_dict()["mixture.0.epoch"].item<int64_t>(), 10);
}

// Positions resume only the datasets they were saved for: another count, another order, or a
// single dataset given a mixture's state (its draw count is no document index) is refused.
TEST(MixtureStream, AStateOfAnotherMixtureIsRefused) {
  auto two = fake_mixture({{5, 1}, {5, 1}}, 1), three = fake_mixture({{5, 1}, {5, 1}, {5, 1}}, 1);
  for (int i = 0; i < 7; ++i) two->next();
  EXPECT_THROW(three->load_state_dict(two->state_dict()), InputError);
  try {
    fake_mixture({{5, 1}, {5, 1}}, 1, {1, 0})->load_state_dict(two->state_dict());
    ADD_FAILURE() << "a mixture with its sources swapped resumed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("training.datasets[0] 'x' is not the dataset"), std::string::npos) << e.what();
  }
  // New weights, same sources: resumes.
  auto reweighted = fake_mixture({{5, 3}, {5, 1}}, 1);
  reweighted->load_state_dict(two->state_dict());
  EXPECT_EQ(reweighted->source_tokens(), two->source_tokens());
  FakeSource single(0, 5);
  EXPECT_THROW(single.load_state_dict(two->state_dict()), InputError);
}

TEST(MixtureStream, ASourceWithNoDocumentRunsDryNamingIt) {
  auto m = fake_mixture({{5, 1}, {0, 1}}, 1);
  try {
    for (int i = 0; i < 100; ++i) m->next();
    FAIL() << "an empty source was drawn from";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "dataset error: training.datasets[1] 'x' runs dry: it holds no non-blank document");
  }
}

// The loader deals out windows of the one mixture stream: dp ranks together read what one rank
// reads alone, window for window.
TEST(MixtureStream, TheLoaderGivesTheSameWindowsForAnyDpDegree) {
  constexpr int64_t kSeq = 6;
  PackedLoader one(fake_mixture({{20, 1}, {7, 2}}, 5), kSeq, 1, "m");
  PackedLoader r0(fake_mixture({{20, 1}, {7, 2}}, 5), kSeq, 1, "m", 0, 2), r1(fake_mixture({{20, 1}, {7, 2}}, 5), kSeq, 1, "m", 1, 2);
  for (int i = 0; i < 50; ++i) {
    EXPECT_TRUE(torch::equal(one.next().inputs, r0.next().inputs)) << 2 * i;
    EXPECT_TRUE(torch::equal(one.next().inputs, r1.next().inputs)) << 2 * i + 1;
  }
}

}  // namespace
}  // namespace ctitan::data::mixture_stream_test
