#include "support/parity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>

#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan::testing {

const std::vector<std::string> kThirtySteps = {"--training.steps", "30", "--metrics.log_freq", "1"};

Rows run_tiny_job(int nproc, const std::vector<std::string>& args) {
  static std::map<std::vector<std::string>, Rows> single_runs;
  if (nproc == 1 && single_runs.count(args)) return single_runs[args];
  TempDir dir;
  std::vector<std::string> head = {"train"};
  if (nproc > 1) head = {"run", "--nproc-per-node", std::to_string(nproc), "--master-port", "0", "train"};
  auto r = run_ctitan(concat(concat(head, tiny_job_args(dir.path())), args), 240);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto rows = read_jsonl(dir.file("metrics.jsonl"));
  if (nproc == 1) single_runs[args] = rows;
  return rows;
}

std::vector<std::string> degrees(int replicate, int shard, int tp) {
  return {"--parallelism.data_parallel_replicate_degree", std::to_string(replicate),
          "--parallelism.data_parallel_shard_degree", std::to_string(shard),
          "--parallelism.tensor_parallel_degree", std::to_string(tp)};
}

int expect_losses_match_by_step(const Rows& run, const Rows& reference) {
  int compared = 0;
  for (const auto& r : run) {
    if (!r.contains("loss")) continue;
    for (const auto& o : reference) {
      if (o.contains("loss") && o["step"] == r["step"]) {
        EXPECT_NEAR(r["loss"].get<double>(), o["loss"].get<double>(), 1e-4 * o["loss"].get<double>())
            << "step " << r["step"];
        ++compared;
      }
    }
  }
  return compared;
}

std::vector<double> validation_losses(const Rows& rows) {
  std::vector<double> out;
  for (const auto& r : rows) {
    if (r.contains("validation_loss")) out.push_back(r["validation_loss"].get<double>());
  }
  return out;
}

Deviation compare_runs(const Rows& reference, const Rows& run, size_t steps) {
  EXPECT_EQ(reference.size(), steps);
  EXPECT_EQ(run.size(), steps);
  Deviation d;
  for (size_t i = 0; i < std::min({reference.size(), run.size(), steps}); ++i) {
    double la = reference[i]["loss"], lb = run[i]["loss"], ga = reference[i]["grad_norm"], gb = run[i]["grad_norm"];
    d.loss = std::max(d.loss, std::abs(lb - la) / std::abs(la));
    d.grad_norm = std::max(d.grad_norm, std::abs(gb - ga) / std::abs(ga));
  }
  return d;
}

void expect_parity(const std::string& what, int nproc, const std::vector<std::string>& layout_args,
                   const std::vector<std::string>& single_args) {
  auto single = run_tiny_job(1, concat(kThirtySteps, single_args));
  auto sharded = run_tiny_job(nproc, concat(kThirtySteps, layout_args));
  auto d = compare_runs(single, sharded, 30);
  std::cout << what << " vs 1 process over 30 fp32 steps: max relative difference loss " << d.loss
            << ", grad_norm " << d.grad_norm << "\n";
  EXPECT_LT(d.loss, 1e-4) << what;
  EXPECT_LT(d.grad_norm, 1e-3) << what;
  ASSERT_FALSE(sharded.empty());
  EXPECT_LT(sharded.back()["loss"].get<double>(), 0.5 * sharded.front()["loss"].get<double>()) << what;
}

ExportComparison compare_hf_exports(int nproc, const std::vector<std::string>& layout_args,
                                    const std::vector<std::string>& common) {
  TempDir one, layout;
  auto r1 = run_ctitan(concat(concat({"train"}, tiny_job_args(one.path())), common), 240);
  EXPECT_EQ(r1.exit_code, 0) << r1.output;
  auto r2 = run_ctitan(concat(concat({"run", "--nproc-per-node", std::to_string(nproc), "--master-port", "0", "train"},
                                     tiny_job_args(layout.path())),
                              concat(common, layout_args)),
                       240);
  EXPECT_EQ(r2.exit_code, 0) << r2.output;
  for (const auto* dir : {&one, &layout}) {
    auto e = run_ctitan({"checkpoint", "export", "--input", dir->file("checkpoint/step-4"), "--output", dir->file("hf")});
    EXPECT_EQ(e.exit_code, 0) << e.output;
  }
  auto compare = run_python(
      {"-c",
       "import sys; from safetensors.numpy import load_file; a = load_file(sys.argv[1]); b = load_file(sys.argv[2]);"
       "assert a.keys() == b.keys(), (sorted(a), sorted(b));"
       "print(len(a), max(float(abs(a[k] - b[k]).max() / max(abs(a[k]).max(), 1e-30)) for k in a))",
       one.file("hf/model.safetensors"), layout.file("hf/model.safetensors")});
  EXPECT_EQ(compare.exit_code, 0) << compare.output;
  ExportComparison out;
  std::istringstream words(compare.output.substr(compare.output.rfind('\n', compare.output.size() - 2) + 1));
  words >> out.tensors >> out.worst;
  return out;
}

}  // namespace ctitan::testing
