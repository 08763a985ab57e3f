#include "ctitan/train/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "ctitan/common/error.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/metrics/peak_flops.h"
#include "ctitan/metrics/profiler.h"
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
  auto env = distributed::read_dist_env();
  if (env.distributed()) {
    dist_ = distributed::init_distributed(config_, env);
    dp_group_ = dist_->mesh->group("dp");
    dp_degree_ = dist_->dims.dp();
    dp_rank_ = dist_->mesh->local_rank("dp");
  }
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
  setup_parallelism();

  int64_t global_batch = t.global_batch_size > 0 ? t.global_batch_size : t.local_batch_size * dp_degree_;
  if (global_batch % (t.local_batch_size * dp_degree_) != 0) {
    throw ConfigError(fmt::format("training.global_batch_size {} is not divisible by local_batch_size {} "
                                  "x dp degree {}", global_batch, t.local_batch_size, dp_degree_));
  }
  grad_accum_steps_ = global_batch / (t.local_batch_size * dp_degree_);
  dataloader_ = make_loader(t.dataset_path, t.dataset, "training.dataset_path");

  flops_per_token_ = models::llama::flops_per_token(args, t.seq_len);
  auto peak = metrics::resolve_peak_flops(config_.metrics.peak_flops, bf16_ ? torch::kBFloat16 : torch::kFloat);
  peak_flops_ = peak.flops;

  std::string jsonl;
  if (config_.metrics.enable_jsonl && (!dist_ || dist_->env.rank == 0)) {
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

// Parallelism is applied to the built model from outside, as torchtitan's parallelize step.
void Trainer::setup_parallelism() {
  if (!dist_) return;
  const auto& dims = dist_->dims;
  if (dims.fsdp_enabled()) {
    throw ConfigError(fmt::format("parallelism.data_parallel_shard_degree resolves to {}: FSDP is not implemented "
                                  "yet; for DDP set data_parallel_shard_degree = 1 and "
                                  "data_parallel_replicate_degree = {}", dims.dp_shard, dims.world_size));
  }
  if (dims.tp_enabled()) throw ConfigError("parallelism.tensor_parallel_degree > 1: TP is not implemented yet");
  if (dims.ddp_enabled()) {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& item : model_->named_parameters()) named.emplace_back(item.key(), item.value());
    ddp_ = std::make_unique<parallel::DistributedDataParallel>(std::move(named), dp_group_,
                                                               config_.parallelism.bucket_cap_mb);
    spdlog::info("DDP over {} replicas, {} gradient buckets of <= {} MB", dims.dp_replicate, ddp_->num_buckets(),
                 config_.parallelism.bucket_cap_mb);
  }
}

std::unique_ptr<data::PackedLoader> Trainer::make_loader(const std::string& path, const std::string& format,
                                                         const std::string& key) const {
  auto stream = data::open_token_stream(path, format, tokenizer_, key);
  return std::make_unique<data::PackedLoader>(std::move(stream), config_.training.seq_len,
                                              config_.training.local_batch_size,
                                              fmt::format("{} '{}'", key, path), dp_rank_, dp_degree_,
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
  if (dp_group_) {
    auto start = std::chrono::steady_clock::now();
    dp_group_->all_reduce(global_tokens, distributed::ReduceOp::kSum);
    since_log_.comm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  auto denominator = global_tokens.clamp_min(1).to(torch::kFloat);

  auto loss_total = torch::zeros({}, torch::TensorOptions(torch::kFloat).device(device_));
  for (size_t i = 0; i < microbatches.size(); ++i) {
    const auto& mb = microbatches[i];
    // Delayed sync: gradients of all but the last microbatch only accumulate locally.
    if (ddp_) ddp_->set_requires_gradient_sync(i + 1 == microbatches.size());
    torch::Tensor loss;
    {
      AutocastGuard autocast(bf16_);
      auto logits = model_->forward(mb.inputs);  // (B, T, vocab)
      loss = summed_cross_entropy(logits, mb.labels) / denominator;
    }
    loss.backward();
    loss_total += loss.detach();
  }
  if (ddp_) since_log_.comm_seconds += ddp_->take_exposed_comm_seconds();
  return loss_total;  // this rank's share: the dp-group sum is the global mean
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

    auto trace = metrics::maybe_trace_step(config_.profiling, config_.job.dump_folder, dist_ ? dist_->env.rank : 0,
                                           step_ + 1);
    auto result = train_step(microbatches);
    trace.reset();  // writes the trace; a traced step is slower than the others
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
    if (step_ == 1 && dist_) {
      // torchtitan's rule: the first step may be slow (allocation, warm-up); after it, a
      // collective that takes longer than train_timeout_seconds means a rank is stuck.
      auto timeout = std::chrono::milliseconds(config_.comm.train_timeout_seconds * 1000);
      dist_->world->set_timeout(timeout);
      dp_group_->set_timeout(timeout);
    }
  }
  logger_->flush();
}

void Trainer::log_metrics(const StepResult& result) {
  auto now = std::chrono::steady_clock::now();
  double seconds = std::chrono::duration<double>(now - since_log_.start).count();
  auto memory = metrics::memory_stats();
  metrics::StepMetrics m;
  m.step = step_;
  // The only host reads of step tensors, and the only metric collectives: at log steps.
  auto loss = result.loss.detach().clone();
  auto step_time = torch::tensor(seconds / double(since_log_.steps), torch::kDouble);
  if (dist_) {
    dp_group_->all_reduce(loss, distributed::ReduceOp::kSum);
    dist_->world->all_reduce(step_time, distributed::ReduceOp::kMax);
  }
  m.loss = loss.item<double>();
  m.grad_norm = result.grad_norm.item<double>();  // DDP grads are identical on every rank
  m.time_step_max_s = step_time.item<double>();
  m.comm_exposed_s = since_log_.comm_seconds / double(since_log_.steps);
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
  if (dp_group_) {  // every dp rank evaluated its own shard of the validation windows
    auto totals = torch::tensor({loss_sum, double(tokens)}, torch::kDouble);
    dp_group_->all_reduce(totals, distributed::ReduceOp::kSum);
    loss_sum = totals[0].item<double>();
    tokens = int64_t(totals[1].item<double>());
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

std::map<std::string, ShardLayouts> Trainer::shard_layouts() const {
  return {};  // no sharding yet: every tensor is whole
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
