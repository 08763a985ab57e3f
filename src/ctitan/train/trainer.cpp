#include "ctitan/train/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "ctitan/common/error.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/metrics/peak_flops.h"
#include "ctitan/models/llama/flops.h"
#include "ctitan/train/autocast.h"
#include "ctitan/train/grad_clip.h"
#include "ctitan/train/loss.h"
#include "ctitan/train/model_builder.h"

namespace ctitan::train {
namespace {

torch::Device pick_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

}  // namespace

Trainer::Trainer(config::JobConfig config)
    : config_(std::move(config)), device_(pick_device()),
      bf16_(config_.training.mixed_precision_param == "bfloat16") {
  metrics::install_memory_tracker();
  const auto& t = config_.training;
  torch::manual_seed(uint64_t(config_.debug.seed));
  if (config_.debug.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);

  if (!config_.model.tokenizer_path.empty()) {
    tokenizer_ = std::make_shared<data::Tokenizer>(data::Tokenizer::load(config_.model.tokenizer_path));
  }
  auto args = model_args_from_config(config_, tokenizer_.get());
  model_ = build_model(args, device_);

  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : model_->named_parameters()) named.emplace_back(item.key(), item.value());
  const auto& o = config_.optimizer;
  optimizer_ = std::make_unique<AdamW>(std::move(named), AdamWOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
  lr_scheduler_ = std::make_unique<LrScheduler>(config_.lr_scheduler, t.steps, o.lr);

  const int64_t dp_degree = 1;  // data parallelism arrives with the distributed runtime
  int64_t global_batch = t.global_batch_size > 0 ? t.global_batch_size : t.local_batch_size * dp_degree;
  if (global_batch % (t.local_batch_size * dp_degree) != 0) {
    throw ConfigError(fmt::format("training.global_batch_size {} is not divisible by local_batch_size {} "
                                  "x dp degree {}", global_batch, t.local_batch_size, dp_degree));
  }
  grad_accum_steps_ = global_batch / (t.local_batch_size * dp_degree);
  dataloader_ = make_loader(t.dataset_path, t.dataset, "training.dataset_path");

  flops_per_token_ = models::llama::flops_per_token(args, t.seq_len);
  auto peak = metrics::resolve_peak_flops(config_.metrics.peak_flops, bf16_ ? torch::kBFloat16 : torch::kFloat);
  peak_flops_ = peak.flops;

  std::string jsonl;
  if (config_.metrics.enable_jsonl) {
    jsonl = (std::filesystem::path(config_.job.dump_folder) / "metrics.jsonl").string();
    std::error_code ec;
    std::filesystem::remove(jsonl, ec);  // a fresh run starts a fresh file
  }
  logger_ = std::make_unique<metrics::MetricsLogger>(jsonl);
  housekeeper_ = std::make_unique<Housekeeper>(
      HousekeepingOptions{t.housekeeping_freq, config_.debug.check_leaks, 0}, [this] { logger_->flush(); });

  auto params = models::llama::count_params(args);
  spdlog::info("model llama3 {}: {:.2f}M params ({:.2f}M non-embedding), dim {} layers {} heads {} kv_heads {} "
               "ffn {} vocab {}", config_.model.flavor, params.total / 1e6, (params.total - params.embedding) / 1e6,
               args.dim, args.n_layers, args.n_heads, args.kv_heads(), args.ffn_hidden_dim(), args.vocab_size);
  spdlog::info("device {}, {} intra-op threads, compute {}, seq_len {}, local batch {}, grad accumulation {}",
               device_.str(), at::get_num_threads(), bf16_ ? "bf16 autocast (fp32 master weights)" : "fp32",
               t.seq_len, t.local_batch_size, grad_accum_steps_);
  spdlog::info("FLOPs per token {:.3e}; peak {:.3f} TFLOP/s for MFU ({})", flops_per_token_, peak_flops_ / 1e12,
               peak.source);
}

std::unique_ptr<data::PackedLoader> Trainer::make_loader(const std::string& path, const std::string& format,
                                                         const std::string& key) const {
  auto stream = data::open_token_stream(path, format, tokenizer_, key);
  return std::make_unique<data::PackedLoader>(std::move(stream), config_.training.seq_len,
                                              config_.training.local_batch_size,
                                              fmt::format("{} '{}'", key, path), /*dp_rank=*/0, /*dp_degree=*/1,
                                              model_->args().vocab_size);
}

std::vector<data::Batch> Trainer::next_global_batch() {
  std::vector<data::Batch> microbatches;
  for (int64_t i = 0; i < grad_accum_steps_; ++i) {
    auto batch = dataloader_->next();
    microbatches.push_back({batch.inputs.to(device_), batch.labels.to(device_)});
  }
  return microbatches;
}

StepResult Trainer::train_step(const std::vector<data::Batch>& microbatches) {
  optimizer_->zero_grad();
  auto loss = forward_backward(microbatches);
  auto grad_norm = clip_grad_norm(optimizer_->params(), config_.training.max_norm);
  optimizer_->step(lr_scheduler_->current_lr());
  lr_scheduler_->step();
  int64_t tokens = 0;
  for (const auto& mb : microbatches) tokens += mb.inputs.numel();
  return {loss, grad_norm, tokens};
}

torch::Tensor Trainer::forward_backward(const std::vector<data::Batch>& microbatches) {
  // Every microbatch's summed loss is divided by the token count of the whole global batch,
  // so the accumulated gradient is the exact token-weighted mean (data parallelism will
  // all-reduce this count across ranks before the first microbatch).
  auto global_tokens = torch::zeros({}, torch::TensorOptions(torch::kLong).device(device_));
  for (const auto& mb : microbatches) global_tokens += count_valid_tokens(mb.labels);
  auto denominator = global_tokens.clamp_min(1).to(torch::kFloat);

  auto loss_total = torch::zeros({}, torch::TensorOptions(torch::kFloat).device(device_));
  for (const auto& mb : microbatches) {
    torch::Tensor loss;
    {
      AutocastGuard autocast(bf16_);
      auto logits = model_->forward(mb.inputs);  // (B, T, vocab)
      loss = summed_cross_entropy(logits, mb.labels) / denominator;
    }
    loss.backward();
    loss_total += loss.detach();
  }
  return loss_total;
}

void Trainer::train() {
  const auto& t = config_.training;
  spdlog::info("training steps {} .. {}", step_ + 1, t.steps);
  since_log_ = SinceLastLog{};
  since_log_.allocs_at_start = metrics::memory_stats().alloc_count;
  metrics::reset_peak_memory();
  while (step_ < t.steps) {
    auto data_start = std::chrono::steady_clock::now();
    auto microbatches = next_global_batch();
    double data_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - data_start).count();

    auto result = train_step(microbatches);
    microbatches.clear();
    ++step_;
    ntokens_seen_ += result.tokens;
    since_log_.steps += 1;
    since_log_.tokens += result.tokens;
    since_log_.data_seconds += data_seconds;

    const bool last = step_ == t.steps;
    if (step_ % config_.metrics.log_freq == 0 || last) log_metrics(result);
    if (config_.validation.enable && (step_ % config_.validation.freq == 0 || last)) validate();
    housekeeper_->maybe_run(step_);
  }
  logger_->flush();
}

void Trainer::log_metrics(const StepResult& result) {
  auto now = std::chrono::steady_clock::now();
  double seconds = std::chrono::duration<double>(now - since_log_.start).count();
  auto memory = metrics::memory_stats();
  metrics::StepMetrics m;
  m.step = step_;
  m.loss = result.loss.item<double>();  // the only host reads of step tensors: at log steps
  m.grad_norm = result.grad_norm.item<double>();
  m.lr = config_.optimizer.lr * lr_scheduler_->factor(step_ - 1);
  m.tps = double(since_log_.tokens) / seconds;
  m.tflops = flops_per_token_ * m.tps / 1e12;
  m.mfu = 100.0 * m.tflops * 1e12 / peak_flops_;
  m.memory_active_bytes = memory.active_bytes;
  m.memory_peak_bytes = memory.peak_bytes;
  m.memory_rss_bytes = metrics::resident_set_bytes();
  m.memory_alloc_count = memory.alloc_count - since_log_.allocs_at_start;
  m.time_step_s = seconds / double(since_log_.steps);
  m.time_data_s = since_log_.data_seconds / double(since_log_.steps);
  logger_->log(m);
  if (!std::isfinite(m.loss)) spdlog::warn("step {}: loss is {}", step_, m.loss);

  metrics::reset_peak_memory();
  since_log_ = SinceLastLog{};
  since_log_.allocs_at_start = memory.alloc_count;
}

double Trainer::validate() {
  torch::NoGradGuard no_grad;
  const auto& v = config_.validation;
  auto loader = make_loader(v.dataset_path.empty() ? config_.training.dataset_path : v.dataset_path,
                            v.dataset.empty() ? config_.training.dataset : v.dataset, "validation.dataset_path");
  double loss_sum = 0;
  int64_t tokens = 0;
  for (int64_t i = 0; i < v.steps; ++i) {
    auto batch = loader->next();
    AutocastGuard autocast(bf16_);
    auto logits = model_->forward(batch.inputs.to(device_));
    loss_sum += summed_cross_entropy(logits, batch.labels.to(device_)).item<double>();
    tokens += count_valid_tokens(batch.labels).item<int64_t>();
  }
  double loss = loss_sum / double(std::max<int64_t>(tokens, 1));
  logger_->log_validation(step_, loss, tokens);
  return loss;
}

std::map<std::string, StateDict> Trainer::state_dicts() const {
  StateDict model;
  for (const auto& item : model_->named_parameters()) model[item.key()] = item.value();
  return {
      {"model", model},
      {"optimizer", optimizer_->state_dict()},
      {"lr_scheduler", lr_scheduler_->state_dict()},
      {"dataloader", dataloader_->state_dict()},
      {"rng", {{"cpu", at::detail::getDefaultCPUGenerator().get_state()}}},
      {"train_state", {{"step", scalar_state(step_)}, {"ntokens_seen", scalar_state(ntokens_seen_)}}},
  };
}

void Trainer::load_state_dicts(const std::map<std::string, StateDict>& state) {
  auto part = [&](const std::string& name) -> const StateDict& {
    auto it = state.find(name);
    if (it == state.end()) throw InputError(fmt::format("state error: missing '{}' state", name));
    return it->second;
  };
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model_->named_parameters()) item.value().copy_(require_state(part("model"), item.key()));
  }
  optimizer_->load_state_dict(part("optimizer"));
  lr_scheduler_->load_state_dict(part("lr_scheduler"));
  dataloader_->load_state_dict(part("dataloader"));
  auto generator = at::detail::getDefaultCPUGenerator();  // a handle sharing the default generator
  generator.set_state(require_state(part("rng"), "cpu"));
  step_ = require_state(part("train_state"), "step").item<int64_t>();
  ntokens_seen_ = require_state(part("train_state"), "ntokens_seen").item<int64_t>();
}

}  // namespace ctitan::train
