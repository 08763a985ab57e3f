#include "ctitan/train/housekeeping.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ctitan/metrics/memory_tracker.h"

namespace ctitan::train {
namespace {

TEST(Housekeeping, RunsOnlyAtMultiplesOfFreq) {
  int flushes = 0;
  Housekeeper h({/*freq=*/3, /*check_leaks=*/false, 0}, [&] { ++flushes; });
  std::vector<bool> ran;
  for (int step = 1; step <= 7; ++step) ran.push_back(h.maybe_run(step));
  EXPECT_EQ(ran, (std::vector<bool>{false, false, true, false, false, true, false}));
  EXPECT_EQ(flushes, 2);
}

TEST(Housekeeping, LeakCheckFiresOnAPlantedLeak) {
  metrics::install_memory_tracker();
  Housekeeper h({/*freq=*/1, /*check_leaks=*/true, 0}, {});
  std::vector<torch::Tensor> leaked;
  h.maybe_run(1);  // records the steady value
  {
    auto temporary = torch::ones({1024});  // freed before the next boundary: not a leak
  }
  EXPECT_NO_THROW(h.maybe_run(2));
  leaked.push_back(torch::ones({256}, torch::kFloat));  // 1024 bytes survive the step: a leak
  try {
    h.maybe_run(3);
    FAIL() << "the planted leak was not detected";
  } catch (const LeakError& e) {
    EXPECT_NE(std::string(e.what()).find("grew by 1024"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctitan::train
