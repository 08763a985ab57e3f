// `make bench` (and scripts/gpu/run.sh on the GPU machine): ctitan training throughput on one GPU
// against PyTorch eager and torch.compile (bench/pytorch_eager_llama.py --device cuda, run by the
// machine's python), measured in the same run on the same GPU, with MFU against the bf16 GEMM peak
// probed here and now and the caching allocator's peak memory of each side.
//
// Shape: Llama 3 1B-class (dim 2048, 16 layers, 32 heads, 8 KV heads, vocab 128256, FFN as the 8B
// flavor's rule gives: 7168), bf16 autocast with fp32 master weights, AdamW, clipping; 8192 tokens a
// step (seq 2048 x 4, seq 8192 x 1), with and without full activation checkpointing.
// Targets (#28): >= 1.0x torch.compile and >= 1.25x eager tok/s at equal or lower peak memory; MFU >= 50%.
// Without a CUDA device it prints "no CUDA device" and exits 0.
// Environment: BENCH_STEPS (timed steps, default 10), BENCH_ROWS (comma-separated row names),
// BENCH_PYTHON (the python with torch, default the venv's), BENCH_SOURCE_DIR (this checkout).
#include <fmt/format.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <torch/version.h>

#include "ctitan/config/config_manager.h"
#include "ctitan/cuda/cuda_module.h"
#include "ctitan/metrics/peak_flops.h"
#include "ctitan/models/common/model_args.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/models/common/flops.h"
#include "ctitan/train/trainer.h"
#include "random_tokens.h"

namespace {

struct Row {
  std::string name;
  int64_t seq_len, batch;
  bool activation_checkpoint;
};

struct Side {
  double tps = 0;                // tokens/s over the timed steps
  int64_t peak_bytes = 0;        // the caching allocator's peak over the timed steps
  std::string error;             // why it did not run
};

std::string env_text(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// The 1B-class shape on the 8B flavor (RoPE theta, norm eps, FFN rule).
ctitan::models::ModelArgs model_args() {
  auto a = ctitan::models::model_flavor("llama3", "8B");
  a.dim = 2048;
  a.n_layers = 16;
  a.n_heads = 32;
  a.n_kv_heads = 8;
  a.vocab_size = 128256;
  return a;
}

Side ctitan_side(const Row& row, const std::filesystem::path& dir, int warmup, int steps) {
  Side side;
  try {
    const auto a = model_args();
    auto data = ctitan::bench::write_random_tokens(dir, a.vocab_size, (warmup + steps + 2) * row.batch * (row.seq_len + 1));
    auto config = ctitan::config::load_job_config(
        "", {"--model.flavor", "8B", "--model.dim", std::to_string(a.dim), "--model.n_layers", std::to_string(a.n_layers),
             "--model.n_heads", std::to_string(a.n_heads), "--model.n_kv_heads", std::to_string(a.n_kv_heads),
             "--model.vocab_size", std::to_string(a.vocab_size), "--training.seq_len",
             std::to_string(row.seq_len), "--training.local_batch_size", std::to_string(row.batch),
             "--training.dataset_path", data, "--training.device", "cuda", "--training.mixed_precision_param",
             "bfloat16", "--activation_checkpoint.mode", row.activation_checkpoint ? "full" : "none",
             "--metrics.peak_flops", "1", "--metrics.enable_jsonl", "false", "--job.dump_folder", dir.string()});
    ctitan::train::Trainer trainer(config);
    auto next = [&] {
      auto b = trainer.dataloader().next();
      return ctitan::data::Batch{b.inputs.to(trainer.device()), b.labels.to(trainer.device())};
    };
    for (int i = 0; i < warmup; ++i) trainer.train_step({next()}).loss.item<double>();
    torch::cuda::synchronize(0);
    ctitan::cuda::reset_device_peak_memory(0);
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) trainer.train_step({next()}).loss.item<double>();
    torch::cuda::synchronize(0);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    side.tps = double(steps * row.batch * row.seq_len) / seconds;
    side.peak_bytes = ctitan::cuda::device_memory_stats(0).peak_allocated_bytes;
  } catch (const std::exception& e) {
    side.error = std::string(e.what()).substr(0, 300);
  }
  return side;
}

Side pytorch_side(const Row& row, int warmup, int steps, bool compiled) {
  Side side;
  const auto a = model_args();
  auto cmd = fmt::format(
      "{} {}/bench/pytorch_eager_llama.py --device cuda --dim {} --n-layers {} --n-heads {} --n-kv-heads {} "
      "--vocab-size {} --multiple-of {} {} --rope-theta {} --seq-len {} --batch {} --dtype bf16 --steps {} "
      "--warmup {}{}{}",
      env_text("BENCH_PYTHON", CTITAN_PYTHON), env_text("BENCH_SOURCE_DIR", CTITAN_SOURCE_DIR), a.dim, a.n_layers,
      a.n_heads, a.kv_heads(), a.vocab_size, a.multiple_of,
      a.ffn_dim_multiplier ? fmt::format("--ffn-dim-multiplier {}", *a.ffn_dim_multiplier) : "", a.rope_theta,
      row.seq_len, row.batch, steps, warmup, row.activation_checkpoint ? " --activation-checkpoint" : "",
      compiled ? " --compile" : "");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {0, 0, "popen failed"};
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  if (pclose(pipe) != 0) return {0, 0, "failed: " + cmd};
  auto json = nlohmann::json::parse(out, nullptr, false);
  if (!json.is_object()) return {0, 0, "no JSON from: " + cmd};
  side.tps = json.value("tps", 0.0);
  side.peak_bytes = json["peak_memory_bytes"].is_number() ? json["peak_memory_bytes"].get<int64_t>() : 0;
  return side;
}

}  // namespace

int main() {
  if (torch::cuda::device_count() == 0) {
    fmt::print("gpu_throughput: no CUDA device; nothing measured ({})\n", ctitan::cuda::module_status());
    return 0;
  }
  const int steps = std::stoi(env_text("BENCH_STEPS", "10")), warmup = 3;
  const std::vector<Row> rows = {{"1B_s2048_b4", 2048, 4, false},
                                 {"1B_s2048_b4_ac", 2048, 4, true},
                                 {"1B_s8192_b1", 8192, 1, false},
                                 {"1B_s8192_b1_ac", 8192, 1, true}};
  const std::string only = env_text("BENCH_ROWS", "");
  const torch::Device gpu(torch::kCUDA, 0);
  double peak = ctitan::metrics::peak_gemm_flops(torch::kBFloat16, gpu);
  fmt::print("gpu_throughput: {}; libtorch {}; {} timed steps after {} warm-up\n", ctitan::cuda::device_name(0),
             TORCH_VERSION, steps, warmup);
  std::fflush(stdout);

  auto dir = std::filesystem::temp_directory_path() / fmt::format("ctitan_gpu_bench_{}", getpid());
  std::filesystem::create_directories(dir);
  struct Measured {
    const Row* row;
    Side ours, eager, compiled;
  };
  std::vector<Measured> measured;
  for (const auto& row : rows) {
    if (!only.empty() && only.find(row.name) == std::string::npos) continue;
    Measured m{&row, ctitan_side(row, dir, warmup, steps), pytorch_side(row, warmup, steps, false),
               pytorch_side(row, warmup, steps, true)};
    for (const auto* side : {&m.ours, &m.eager, &m.compiled}) {
      if (!side->error.empty()) fmt::print(stderr, "gpu_throughput: {}: {}\n", row.name, side->error);
    }
    measured.push_back(m);
    peak = std::max(peak, ctitan::metrics::peak_gemm_flops(torch::kBFloat16, gpu));  // best probe: see train_throughput
  }
  std::filesystem::remove_all(dir);

  fmt::print("bf16 GEMM peak (best of 4096^3 and 8192^3 products, before and after each row): {:.1f} TFLOP/s\n\n",
             peak / 1e12);
  fmt::print("{:<16} {:>12} {:>11} {:>8} {:>13} {:>8} {:>6} {:>10} {:>10} {:>10}\n", "row", "ctitan tok/s",
             "eager tok/s", "vs eager", "compile tok/s", "vs comp", "MFU", "ctitan GiB", "eager GiB", "comp GiB");
  nlohmann::json results = nlohmann::json::array();
  const auto a = model_args();
  for (const auto& [row, ours, eager, compiled] : measured) {
    const double mfu = 100 * ctitan::models::flops_per_token(a, row->seq_len) * ours.tps / peak;
    auto ratio = [&](const Side& base) { return base.tps > 0 ? ours.tps / base.tps : 0.0; };
    auto gib = [](int64_t b) { return double(b) / double(1LL << 30); };
    fmt::print("{:<16} {:>12.0f} {:>11.0f} {:>7.2f}x {:>13.0f} {:>7.2f}x {:>5.1f}% {:>10.1f} {:>10.1f} {:>10.1f}\n",
               row->name, ours.tps, eager.tps, ratio(eager), compiled.tps, ratio(compiled), mfu, gib(ours.peak_bytes),
               gib(eager.peak_bytes), gib(compiled.peak_bytes));
    results.push_back({{"row", row->name}, {"ctitan_tps", ours.tps}, {"eager_tps", eager.tps},
                       {"compile_tps", compiled.tps}, {"ratio_eager", ratio(eager)},
                       {"ratio_compile", ratio(compiled)}, {"mfu_bf16_peak", mfu}, {"peak_bf16_flops", peak},
                       {"ctitan_peak_bytes", ours.peak_bytes}, {"eager_peak_bytes", eager.peak_bytes},
                       {"compile_peak_bytes", compiled.peak_bytes}});
  }
  std::ofstream("gpu_throughput.json") << results.dump(2) << "\n";
  return 0;
}
