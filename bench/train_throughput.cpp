// `make bench`: ctitan training throughput against PyTorch 2.x, eager and under torch.compile
// (bench/pytorch_eager_llama.py, run by the venv's Python), measured in the same run on the same
// machine, plus MFU against the bf16 and fp32 GEMM peaks measured here and now.
//
// Rows: debugmodel seq 256 batch 8 (bf16, fp32), debugmodel seq 2048 batch 1 (bf16),
// 134M seq 512 batch 4 (bf16). Both sides train on random tokens (throughput does not depend on
// the data), with AdamW, clipping and, for bf16, autocast with fp32 master weights.
// Environment: BENCH_STEPS (timed steps, default 8), BENCH_ROWS (comma-separated row names).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <torch/version.h>

#include "ctitan/common/build_info.h"
#include "ctitan/common/threads.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/metrics/peak_flops.h"
#include "ctitan/models/common/flops.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/train/model_builder.h"
#include "ctitan/train/trainer.h"
#include "random_tokens.h"

namespace {

struct Row {
  std::string name, flavor;
  int64_t seq_len, batch;
  bool bf16;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

double ctitan_tps(const Row& row, const std::filesystem::path& dir, int warmup, int steps) {
  auto args = ctitan::models::model_flavor("llama3", row.flavor);
  // Enough for warm-up plus timed steps without wrapping.
  auto data = ctitan::bench::write_random_tokens(dir, args.vocab_size, (warmup + steps + 2) * row.batch * (row.seq_len + 1));
  auto config = ctitan::config::load_job_config(
      "", {"--model.flavor", row.flavor, "--training.seq_len", std::to_string(row.seq_len),
           "--training.local_batch_size", std::to_string(row.batch), "--training.dataset_path", data,
           "--training.mixed_precision_param", row.bf16 ? "bfloat16" : "float32", "--metrics.peak_flops", "1",
           "--metrics.enable_jsonl", "false", "--job.dump_folder", dir.string()});
  ctitan::train::Trainer trainer(config);
  for (int i = 0; i < warmup; ++i) trainer.train_step({trainer.dataloader().next()});
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) trainer.train_step({trainer.dataloader().next()}).loss.item<double>();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return double(steps * row.batch * row.seq_len) / seconds;
}

// `compiled`: the same model under torch.compile (inductor); compile time is excluded.
double pytorch_tps(const Row& row, int warmup, int steps, bool compiled) {
  auto a = ctitan::models::model_flavor("llama3", row.flavor);
  auto cmd = fmt::format(
      "{} {}/bench/pytorch_eager_llama.py --dim {} --n-layers {} --n-heads {} --n-kv-heads {} --vocab-size {} "
      "--multiple-of {} --rope-theta {} --seq-len {} --batch {} --dtype {} --steps {} --warmup {} --threads {}{}",
      CTITAN_PYTHON, CTITAN_SOURCE_DIR, a.dim, a.n_layers, a.n_heads, a.kv_heads(), a.vocab_size, a.multiple_of,
      a.rope_theta, row.seq_len, row.batch, row.bf16 ? "bf16" : "fp32", steps, warmup, at::get_num_threads(),
      compiled ? " --compile" : "");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return 0;
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  if (pclose(pipe) != 0) {
    fmt::print(stderr, "pytorch baseline failed for {}: {}\n", row.name, cmd);
    return 0;
  }
  auto json = nlohmann::json::parse(out, nullptr, false);
  return json.is_object() ? json.value("tps", 0.0) : 0.0;
}

}  // namespace

int main() {
  int threads = ctitan::configure_threads();
  int steps = env_int("BENCH_STEPS", 8), warmup = 3;
  std::vector<Row> rows = {{"debug_s256_b8_bf16", "debugmodel", 256, 8, true},
                           {"debug_s256_b8_fp32", "debugmodel", 256, 8, false},
                           {"debug_s2048_b1_bf16", "debugmodel", 2048, 1, true},
                           {"134M_s512_b4_bf16", "134M", 512, 4, true}};
  std::string only = std::getenv("BENCH_ROWS") ? std::getenv("BENCH_ROWS") : "";

  // The GEMM peak is probed at the start and again before every row, and MFU is taken against the
  // best probe: on a shared machine a single probe taken in a slow moment would understate the
  // peak and overstate MFU (seen here: a start-of-run probe at half the machine's bf16 rate).
  double peak_bf16 = 0, peak_fp32 = 0;
  auto probe_peaks = [&] {
    peak_bf16 = std::max(peak_bf16, ctitan::metrics::peak_gemm_flops(torch::kBFloat16));
    peak_fp32 = std::max(peak_fp32, ctitan::metrics::peak_gemm_flops(torch::kFloat));
  };
  probe_peaks();
  fmt::print("train_throughput: {} threads, {} timed steps after {} warm-up\n", threads, steps, warmup);
  fmt::print("CPU: {}; libtorch {}\n", ctitan::cpu_description(), TORCH_VERSION);
  std::fflush(stdout);

  struct Measured {
    const Row* row;
    double ours, eager, compiled;
  };
  std::vector<Measured> measured;
  auto dir = std::filesystem::temp_directory_path() / fmt::format("ctitan_bench_{}", getpid());
  std::filesystem::create_directories(dir);
  for (const auto& row : rows) {
    if (!only.empty() && only.find(row.name) == std::string::npos) continue;
    probe_peaks();
    double ours = ctitan_tps(row, dir, warmup, steps);
    double eager = pytorch_tps(row, warmup, steps, /*compiled=*/false);
    double compiled = pytorch_tps(row, warmup, steps, /*compiled=*/true);
    measured.push_back({&row, ours, eager, compiled});
    fmt::print(stderr, "train_throughput: {} done\n", row.name);
  }
  probe_peaks();

  fmt::print("GEMM peak (best probe of 2048^3 and 3072^3 products, at the start, before each row and at the end): "
             "bf16 {:.3f} TFLOP/s, fp32 {:.3f} TFLOP/s\n\n", peak_bf16 / 1e12, peak_fp32 / 1e12);
  fmt::print("{:<22} {:>12} {:>11} {:>8} {:>13} {:>8} {:>10} {:>10}\n", "row", "ctitan tok/s", "eager tok/s",
             "vs eager", "compile tok/s", "vs comp", "MFU(bf16)", "MFU(fp32)");
  nlohmann::json results = nlohmann::json::array();
  for (const auto& [row, ours, eager, compiled] : measured) {
    double achieved = ctitan::models::flops_per_token(ctitan::models::model_flavor("llama3", row->flavor),
                                                             row->seq_len) * ours;
    auto ratio = [&](double base) { return base > 0 ? ours / base : 0.0; };
    fmt::print("{:<22} {:>12.0f} {:>11.0f} {:>7.2f}x {:>13.0f} {:>7.2f}x {:>9.1f}% {:>9.1f}%\n", row->name, ours,
               eager, ratio(eager), compiled, ratio(compiled), 100 * achieved / peak_bf16, 100 * achieved / peak_fp32);
    results.push_back({{"row", row->name}, {"ctitan_tps", ours}, {"eager_tps", eager}, {"compile_tps", compiled},
                       {"ratio_eager", ratio(eager)}, {"ratio_compile", ratio(compiled)},
                       {"mfu_bf16_peak", 100 * achieved / peak_bf16}, {"mfu_fp32_peak", 100 * achieved / peak_fp32}});
  }
  std::filesystem::remove_all(dir);
  std::ofstream("train_throughput.json") << results.dump(2) << "\n";
  return 0;
}
