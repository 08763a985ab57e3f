// The HF export of a run trained on CUDA, loaded by transformers on CUDA, computes the logits
// ctitan computes on CUDA (tests/support/gpu.h: skipped without a GPU).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ctitan/checkpoint/hf/hf_export.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/train/trainer.h"
#include "support/gpu.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;

// Both sides compute in fp32 on the same GPU from bitwise-identical weights (fp32 export), TF32
// off (libtorch's and PyTorch's default for matmuls), so they differ by summation order only, as
// on the CPU (tests/cli/hf_transformers_test.cpp argues 1e-4 of the largest logit there, measured
// a few 1e-7); cuBLAS's split-K reductions are of the same order.
constexpr double kGpuLogitTol = 1e-4;

TEST(GpuHfExport, ACudaRunsExportGivesItsLogitsInTransformersOnCuda) {
  CTITAN_SKIP_WITHOUT_CUDA();
  if (!testing::have_python()) GTEST_SKIP() << "no Python with transformers (CTITAN_PYTHON is empty)";
  testing::TempDir dir;
  auto config = testing::tiny_job_config(dir.path());
  config.training.device = config::DeviceChoice::kCuda;
  train::Trainer trainer(config);
  trainer.train();
  StateDict state;
  const auto states = trainer.state_dicts();  // by value: .at() of the temporary would dangle in a range-for
  for (const auto& [k, v] : states.at("model")) state[k] = v.detach().cpu().clone();
  const auto args = trainer.model().args();
  const fs::path hf = fs::path(dir.path()) / "hf";
  checkpoint::hf::export_hf(state, args, {}, hf);

  const std::vector<int64_t> ids{3, 4, 5, 6, 7, 20, 31, 0, 1, 2, 9, 9, 15, 16, 30, 8};
  torch::Tensor ours;
  {
    torch::NoGradGuard no_grad;
    models::Transformer model(args);
    for (auto& p : model->named_parameters()) p.value().copy_(state.at(p.key()));
    model->to(torch::Device(torch::kCUDA, 0));
    model->eval();
    auto tokens = torch::tensor(ids, torch::kLong).unsqueeze(0).to(torch::Device(torch::kCUDA, 0));  // (1, T)
    ours = model->forward(tokens)[0].cpu();  // (T, vocab)
  }

  const auto out = (fs::path(dir.path()) / "reference.json").string();
  auto r = testing::run_python({testing::source_dir() + "/tests/cli/hf_transformers_reference.py", "logits", "--model",
                                hf.string(), "--ids", fmt::format("{}", fmt::join(ids, ",")), "--device", "cuda",
                                "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ref = nlohmann::json::parse(testing::read_file(out));
  std::vector<float> flat;
  for (const auto& row : ref["logits"]) {
    for (const auto& v : row) flat.push_back(v.get<float>());
  }
  auto theirs = torch::tensor(flat).view(ref["shape"].get<std::vector<int64_t>>());
  ASSERT_EQ(theirs.sizes(), ours.sizes());
  const double diff = (ours.to(torch::kDouble) - theirs.to(torch::kDouble)).abs().max().item<double>();
  const double scale = std::max(1.0, theirs.abs().max().item<double>());
  EXPECT_LE(diff, kGpuLogitTol * scale) << "max |ctitan - transformers| " << diff << ", scale " << scale;
  std::cout << "[ CUDA export ] max |ctitan - transformers| = " << diff << ", scale " << scale << "\n";
}

}  // namespace
}  // namespace ctitan
