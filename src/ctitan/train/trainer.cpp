#include "ctitan/train/trainer.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <ctime>
#include <filesystem>

#include "ctitan/common/build_info.h"
#include "ctitan/common/dtype_names.h"
#include "ctitan/config/config_fields.h"
#include "ctitan/common/error.h"
#include "ctitan/cuda/cuda_module.h"
#include "ctitan/distributed/bandwidth_probe.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/rank_device.h"
#include "ctitan/distributed/stream_stalls.h"
#include "ctitan/estimate/hardware_profiles.h"
#include "ctitan/estimate/job_estimate.h"
#include "ctitan/estimate/memory_floor.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/metrics/peak_flops.h"
#include "ctitan/metrics/profiler.h"
#include "ctitan/models/common/flops.h"
#include "ctitan/models/common/parameter_shapes.h"
#include "ctitan/components/grad_clip.h"
#include "ctitan/components/loss.h"
#include "ctitan/train/job_setup.h"
#include "ctitan/train/model_builder.h"

namespace ctitan::train {
namespace {

// cuda:LOCAL_RANK or the CPU (training.device), set as the current device before anything touches CUDA.
torch::Device pick_device(const config::JobConfig& config) {
  return distributed::use_rank_device(config.training.device, distributed::read_dist_env().local_rank);
}

}  // namespace

Trainer::Trainer(config::JobConfig config)
    : config_(std::move(config)), device_(pick_device(config_)),
      bf16_(config_.training.mixed_precision_param == torch::kBFloat16) {
  metrics::install_memory_tracker();
  dist_ = distributed::init_distributed(config_, distributed::read_dist_env());
  dp_group_ = dist_->mesh->group("dp");
  dp_degree_ = dist_->dims.dp();
  dp_rank_ = dist_->mesh->local_rank("dp");
  const auto& t = config_.training;
  int64_t global_batch = t.global_batch_size > 0 ? t.global_batch_size : t.local_batch_size * dp_degree_;
  if (global_batch % (t.local_batch_size * dp_degree_) != 0) {
    throw ConfigError(fmt::format("training.global_batch_size {} is not divisible by local_batch_size {} "
                                  "x dp degree {}", global_batch, t.local_batch_size, dp_degree_));
  }
  grad_accum_steps_ = global_batch / (t.local_batch_size * dp_degree_);
  // A step of more microbatches would not end in any useful time (17 minutes at 1 ms each).
  constexpr int64_t kMaxMicrobatches = int64_t(1) << 20;
  if (grad_accum_steps_ > kMaxMicrobatches) {
    throw ConfigError(fmt::format("training.global_batch_size {} is {} microbatches of local_batch_size {} x dp "
                                  "degree {}; at most {} per step", global_batch, grad_accum_steps_,
                                  t.local_batch_size, dp_degree_, kMaxMicrobatches));
  }
  job_ = seed_job(config_, device_);
  const auto& args = job_.args;
  refuse_if_the_step_cannot_fit(args);
  parallel::refuse_layouts_the_model_lacks(args, dist_->dims, config_);
  model_ = parallel::parallelize(models::build_deferred(args), *dist_, config_, device_);
  log_setup_memory();

  const auto& o = config_.optimizer;
  optimizer_ = std::make_unique<components::AdamW>(model_->trained_parameters(), components::AdamWOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
  lr_scheduler_ = std::make_unique<components::LrScheduler>(config_.lr_scheduler, t.steps, o.lr);

  dataloader_ = make_loader(config_, job_, DataSplit::kTraining, t.local_batch_size, dp_rank_, dp_degree_);

  const double flops_per_token = models::flops_per_token(args, t.seq_len);
  auto peak = metrics::resolve_peak_flops(config_.metrics.peak_flops, bf16_ ? torch::kBFloat16 : torch::kFloat, device_);

  checkpointer_ = std::make_unique<checkpoint::CheckpointManager>(
      config_, checkpoint::store_coordinator(dist_->store, dist_->env.rank, dist_->env.world_size), dist_->world,
      checkpoint::RankPlace{dist_->env.rank, dist_->env.world_size, int(dp_rank_), int(dp_degree_)}, *this);
  std::set<std::string> model_keys;  // the whole model's, whatever this rank's stage holds
  for (const auto& [fqn, shape] : models::parameter_shapes(args)) model_keys.insert(fqn);
  for (const auto& [fqn, shape] : models::buffer_shapes(args)) model_keys.insert(fqn);
  checkpointer_->expect_model_keys(std::move(model_keys));
  if (job_.tokenizer) checkpointer_->expect_tokenizer(job_.tokenizer->fingerprint());
  checkpointer_->load();
  if (step_ > t.steps) {
    // Resuming would log "steps 7 .. 3", train nothing and exit 0 as if the job were done.
    throw ConfigError(fmt::format("training.steps {} ends before the checkpoint's step {} (in {}): raise "
                                  "training.steps to continue it, or give another checkpoint.folder",
                                  t.steps, step_, config_.checkpoint.folder));
  }

  // Under PP the loss is summed over pp as well: ranks without the last stage add an exact 0, so
  // rank 0 logs the real loss (torchtitan's first stage logs -1).
  metrics::MetricsSetup metrics{flops_per_token, peak.flops, dist_->loss_group(), dist_->world};
  if (auto pipeline = model_->pipeline_position()) {
    metrics.pp_bubble_theory = pipeline->bubble_theory;
    metrics.pp_rank = pipeline->rank;
    metrics.pp_size = pipeline->size;
  }
  if (device_.is_cuda()) {
    metrics.cuda_device = device_.index();
    metrics.memory_capacity_bytes = cuda::device_memory_stats(device_.index()).capacity_bytes;
  } else {
    metrics.memory_capacity_bytes = metrics::physical_memory_bytes() / dist_->env.local_world_size;
  }
  if (dist_->env.world_size > 1) {  // a world of one communicates nothing
    metrics.comm_bytes = [mesh = dist_->mesh.get()] { return mesh->comm_bytes(); };
    metrics.comm_seconds = [mesh = dist_->mesh.get()] { return mesh->comm_seconds(); };
    metrics.link_bytes_per_s = link_bytes_per_second();
  }
  if (config_.metrics.enable_jsonl && dist_->env.rank == 0) {
    metrics.jsonl_path = (std::filesystem::path(config_.job.dump_folder) / "metrics.jsonl").string();
    metrics::prepare_metrics_file(metrics.jsonl_path, step_);  // after the load: step_ is where this run resumes
  }
  if (config_.metrics.enable_tensorboard && dist_->env.rank == 0) {
    metrics.tensorboard_dir = (std::filesystem::path(config_.job.dump_folder) / config_.metrics.save_tb_folder /
                               fmt::format("{:%Y%m%d-%H%M}", fmt::localtime(std::time(nullptr))))
                                  .string();
  }
  metrics.extra_fields = [this](int64_t window_steps) {
    // A mixture: tokens drawn from each source so far (every rank reads the same stream, so the
    // counts are the run's, not this rank's share). Host integers: no tensor is held.
    std::vector<std::pair<std::string, double>> fields;
    for (const auto& [name, tokens] : dataloader_->source_tokens()) fields.emplace_back("data_tokens/" + name, double(tokens));
    // MoE layers: the last step's expert loads and bias ranges (this rank's pipeline stage's layers).
    for (auto& field : model_->moe_metrics(window_steps)) fields.push_back(std::move(field));
    return fields;
  };
  metrics_ = std::make_unique<metrics::MetricsProcessor>(std::move(metrics));
  // Metrics rows and TensorBoard points of the steps a checkpoint covers are on disk before it commits.
  checkpointer_->set_before_save([this] {
    check_no_non_finite_step();  // a device step that went non-finite is never checkpointed
    metrics_->sync();
  });
  first_non_finite_step_ = torch::zeros({}, torch::TensorOptions(torch::kLong).device(device_));
  housekeeper_ = std::make_unique<Housekeeper>(
      HousekeepingOptions{t.housekeeping_freq, config_.debug.check_leaks, 0}, [this] { metrics_->flush(); });

  auto params = models::count_params(args);
  spdlog::info("model {} {}: {:.2f}M params ({:.2f}M non-embedding), dim {} layers {} heads {} kv_heads {} "
               "ffn {} vocab {}", config_.model.name, config_.model.flavor, params.total / 1e6, (params.total - params.embedding) / 1e6,
               args.dim, args.n_layers, args.n_heads, args.kv_heads(), args.ffn_hidden_dim(), args.vocab_size);
  if (const auto& moe = args.moe; moe.num_experts > 0) {
    spdlog::info("MoE: {:.2f}M of {:.2f}M params active per token; {} experts of hidden {}, top {}{}, {} shared; "
                 "load balancing {}", params.active / 1e6, params.total / 1e6, moe.num_experts, moe.hidden_dim, moe.top_k,
                 moe.route_norm ? " renormalised" : "", moe.num_shared_experts,
                 moe.load_balance_coeff > 0 ? fmt::format("by expert bias, coefficient {}", moe.load_balance_coeff) : "off");
  }
  if (bf16_ && device_.is_cpu() && !cpu_has_fast_bf16_gemm()) {
    spdlog::warn("bf16 on a CPU without bf16 instructions ({}): libtorch's bf16 matmuls are several times "
                 "slower than fp32 here; --training.mixed_precision_param float32 trains faster on this CPU",
                 cpu_description());
  }
  spdlog::info("device {}, {} intra-op threads, compute {}, seq_len {}, local batch {}, grad accumulation {}",
               device_.str(), at::get_num_threads(), model_->compute_precision(), t.seq_len, t.local_batch_size, grad_accum_steps_);
  spdlog::info("FLOPs per token {:.3e}; peak {:.3f} TFLOP/s for MFU ({})", flops_per_token, peak.flops / 1e12,
               peak.source);
}

void Trainer::log_setup_memory() const {
  int64_t kept = 0;
  for (const auto& [fqn, p] : model_->trained_parameters()) kept += p.numel() * int64_t(p.element_size());
  // The set-up's peak: the counted host allocator on the CPU, the caching allocator on a GPU.
  const int64_t peak = device_.is_cuda() ? cuda::device_memory_stats(device_.index()).peak_allocated_bytes
                                         : metrics::memory_stats().peak_bytes;
  const int64_t whole = models::count_params(model_->args()).total * int64_t(sizeof(float));
  spdlog::info("model set up: {:.2f} MiB of parameters on this rank ({:.2f} MiB for the whole model), set-up "
               "peak {:.2f} MiB", double(kept) / (1 << 20), double(whole) / (1 << 20), double(peak) / (1 << 20));
}

void Trainer::refuse_if_the_step_cannot_fit(const models::ModelArgs& args) const {
  auto job = estimate::job_shape_from_config(config_, args, dist_->env.world_size);
  // A floor of what any layout holds, in double precision, on every device: a model too big for
  // any batch stops here, and so do absurd sizes where the walk below does not apply.
  const auto floor = estimate::memory_floor(job);
  const double memory_bytes = device_.is_cuda() ? double(cuda::device_memory_stats(device_.index()).capacity_bytes)
                                          : double(metrics::physical_memory_bytes()) / double(dist_->env.local_world_size);
  const char* whose = device_.is_cuda() ? "this GPU's memory" : "this rank's share of the machine's memory";
  if (floor.state_bytes > memory_bytes) estimate::refuse_beyond_memory(floor, memory_bytes, whose);
  // The walk, only where `ctitan estimate`'s CPU walk follows the step; elsewhere it would overestimate.
  if (!device_.is_cpu() || !estimate::cpu_walk_follows(config_, args)) {
    estimate::refuse_beyond_memory(floor, memory_bytes, whose);
    return;
  }
  auto hw = estimate::hardware_profile("cpu");
  hw.memory_bytes = metrics::physical_memory_bytes() / dist_->env.local_world_size;
  auto memory = estimate::estimate_memory(job, hw);
  if (memory.peak_bytes <= hw.memory_bytes) return;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  throw ConfigError(fmt::format(
      "the step needs about {:.1f} GiB per rank (ctitan estimate: model state {:.1f} GiB, activations {:.1f} GiB), "
      "more than this rank's share of memory, {:.1f} GiB: lower training.local_batch_size ({}) or training.seq_len "
      "({}), or shard over more ranks", double(memory.peak_bytes) / kGiB,
      double(memory.state_params_bytes + memory.state_grads_bytes + memory.state_optimizer_bytes) / kGiB,
      double(memory.activations_bytes) / kGiB, double(hw.memory_bytes) / kGiB, config_.training.local_batch_size,
      config_.training.seq_len));
}

double Trainer::link_bytes_per_second() const {
  if (config_.comm.link_gbytes_per_s > 0) return config_.comm.link_gbytes_per_s * 1e9;
  auto group = dp_group_->size() > 1 ? dp_group_ : dist_->world;
  // Every rank measures; the best any saw is what the link can do.
  auto best = torch::tensor(distributed::all_gather_bytes_per_second(*group, int64_t(64) << 20, 3, device_), torch::kDouble);
  dist_->world->all_reduce(best, distributed::ReduceOp::kMax);
  spdlog::info("link bandwidth for metrics: {:.2f} GB/s (a 64 MiB all-gather over {} ranks; set "
               "comm.link_gbytes_per_s to give it)", best.item<double>() / 1e9, group->size());
  return best.item<double>();
}

void Trainer::stop_if_not_finite(const torch::Tensor& grad_norm) {
  // The norm is all-reduced over the mesh, so every rank sees the same value and stops at the
  // same step. A non-finite loss makes it non-finite too.
  if (grad_norm.is_cpu()) {
    // On the host already (clipping read it): checked every step, before the update, so a
    // non-finite update never reaches the parameters or any checkpoint.
    float norm = grad_norm.item<float>();
    if (!std::isfinite(norm)) {
      throw std::runtime_error(fmt::format("step {}: the gradient norm is {} (a non-finite loss or gradient): training "
                                           "stopped before the optimizer update; lower optimizer.lr or "
                                           "training.max_norm, or check the data", step_ + 1, norm));
    }
    return;
  }
  // A device norm is not read here (no host sync per step): the first non-finite step is kept
  // as a device tensor and checked at log steps and before every checkpoint save.
  auto bad = ~torch::isfinite(grad_norm) & (first_non_finite_step_ == 0);
  first_non_finite_step_ = torch::where(bad, torch::full_like(first_non_finite_step_, step_ + 1), first_non_finite_step_);
}

void Trainer::check_no_non_finite_step() const {
  if (!first_non_finite_step_.defined() || first_non_finite_step_.is_cpu()) return;
  if (int64_t step = first_non_finite_step_.item<int64_t>()) {
    throw std::runtime_error(fmt::format("step {}: the gradient norm was not finite (a non-finite loss or gradient); "
                                         "training stopped, nothing after it was saved", step));
  }
}

std::vector<data::Batch> Trainer::next_global_batch() {
  std::vector<data::Batch> microbatches;
  for (int64_t i = 0; i < grad_accum_steps_; ++i) {
    auto batch = dataloader_->next();
    if (device_.is_cuda()) {
      // From pinned memory, without blocking: a pageable copy would wait for the previous step's
      // kernels, and time_data_s would count the device's work as data loading.
      microbatches.push_back({batch.inputs.pin_memory().to(device_, /*non_blocking=*/true),
                              batch.labels.pin_memory().to(device_, /*non_blocking=*/true)});
    } else {
      microbatches.push_back({batch.inputs, batch.labels});
    }
  }
  return microbatches;
}

StepResult Trainer::train_step(const std::vector<data::Batch>& microbatches) {
  optimizer_->zero_grad();
  auto [loss, rank_loss] = forward_backward(microbatches);
  model_->finish_gradients();
  auto grad_norm = components::clip_grad_norm(optimizer_->params(), config_.training.max_norm, model_->grad_norm_groups());
  stop_if_not_finite(grad_norm);
  model_->before_optimizer_step();
  // After the grad norm, so that TP's share of its all-reduces counts as exposed communication too.
  const auto times = model_->take_step_times();
  metrics_->add_comm_seconds(times.exposed_comm_seconds);
  metrics_->add_grad_sync_seconds(times.grad_sync_seconds);
  if (times.pipeline) metrics_->add_pipeline_seconds(times.pipeline->busy, times.pipeline->total);
  in_optimizer_update_ = true;
  optimizer_->step(lr_scheduler_->current_lr());
  lr_scheduler_->step();
  in_optimizer_update_ = false;
  // On a GPU, waiting on NCCL work never blocks the host: the exposed communication is the time
  // the compute stream stood still waiting (distributed/stream_stalls.h).
  if (device_.is_cuda()) metrics_->add_comm_seconds(distributed::take_stream_stall_seconds());
  int64_t tokens = 0;
  for (const auto& mb : microbatches) tokens += mb.inputs.numel();
  return {loss, rank_loss, grad_norm, tokens};
}

std::pair<torch::Tensor, torch::Tensor> Trainer::forward_backward(const std::vector<data::Batch>& microbatches) {
  // Every microbatch's summed loss is divided by the token count of the whole global batch,
  // so the accumulated gradient is the exact token-weighted mean (data parallelism will
  // all-reduce this count across ranks before the first microbatch).
  auto global_tokens = torch::zeros({}, torch::TensorOptions(torch::kLong).device(device_));
  auto rank_tokens = torch::zeros({}, torch::TensorOptions(torch::kLong).device(device_));
  for (const auto& mb : microbatches) {
    global_tokens += components::count_valid_tokens(mb.labels);
    rank_tokens += model_->rank_valid_tokens(mb.labels);  // under CP, its chunks' only
  }
  const auto start = std::chrono::steady_clock::now();
  dp_group_->all_reduce(global_tokens, distributed::ReduceOp::kSum);
  metrics_->add_comm_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  auto denominator = global_tokens.clamp_min(1).to(torch::kFloat);

  auto loss_total = torch::zeros({}, torch::TensorOptions(torch::kFloat).device(device_));
  for (size_t i = 0; i < microbatches.size(); ++i) {
    const auto& mb = microbatches[i];
    // Delayed sync reduces once, after the last microbatch; every_microbatch reduces each one.
    const bool reduce = i + 1 == microbatches.size() || model_->reduce_every_microbatch();
    loss_total += model_->forward_backward(mb.inputs, mb.labels, denominator, reduce);
  }
  // This rank's share: the dp-group sum is the global mean. Rescaled to its own tokens, it is the
  // per-rank loss whose maximum torchtitan logs as global_max_loss.
  auto rank_loss = loss_total * denominator / rank_tokens.clamp_min(1).to(torch::kFloat);
  return {loss_total, rank_loss};
}

void Trainer::train() {
  if (config_.checkpoint.create_seed_checkpoint) return checkpointer_->save_seed();
  try {
    train_steps();
  } catch (const std::exception& e) {
    checkpointer_->on_exception(step_, in_optimizer_update_, e.what());
    throw;
  }
}

void Trainer::train_steps() {
  const auto& t = config_.training;
  if (checkpointer_->stop_before_training()) {
    if (dist_->env.rank == 0) {
      spdlog::warn("SIGTERM during set-up: stopping before step {}, with nothing new to save", step_ + 1);
    }
    checkpointer_->finish();
    return;
  }
  spdlog::info("training steps {} .. {}", step_ + 1, t.steps);
  metrics_->start_window();
  while (step_ < t.steps) {
    checkpointer_->step_starting(step_);
    auto data_start = std::chrono::steady_clock::now();
    auto microbatches = next_global_batch();
    double data_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - data_start).count();

    auto trace = metrics::maybe_trace_step(config_.profiling, config_.job.dump_folder, dist_->env.rank, step_ + 1);
    auto result = train_step(microbatches);
    trace.reset();  // writes the trace; a traced step is slower than the others
    microbatches.clear();
    ++step_;
    ntokens_seen_ += result.tokens;
    // Throughput per device, as torchtitan: a tp group computes its dp rank's tokens together.
    // And a pipeline's stages compute them together too.
    metrics_->record_step(result.tokens / model_->ranks_per_batch(), data_seconds);

    const bool last = step_ == t.steps;
    if (step_ % config_.metrics.log_freq == 0 || last) {
      check_no_non_finite_step();
      metrics_->log(step_, result.loss, result.rank_loss, result.grad_norm, config_.optimizer.lr * lr_scheduler_->factor(step_ - 1),
                    {optimizer_->params(), optimizer_->state_dict()});
    }
    if (config_.validation.enable && (step_ % config_.validation.freq == 0 || last)) validate();
    housekeeper_->maybe_run(step_);
    if (step_ == 1) {
      // torchtitan's rule: the first step may be slow (allocation, warm-up); after it, a
      // collective that takes longer than train_timeout_seconds means a rank is stuck.
      auto timeout = std::chrono::milliseconds(config_.comm.train_timeout_seconds * 1000);
      dist_->world->set_timeout(timeout);
      dist_->mesh->set_timeouts(timeout);
      checkpointer_->set_timeout(timeout);
    }
    if (checkpointer_->after_step(step_, last)) break;
  }
  checkpointer_->finish();
  metrics_->log_summary();
  metrics_->flush();
}

double Trainer::validate() {
  auto loader = make_loader(config_, job_, DataSplit::kValidation, config_.training.local_batch_size, dp_rank_,
                            dp_degree_);
  auto [loss_sum, tokens] = validation_sums(config_, *loader, device_, [this](const auto& inputs, const auto& labels) {
    return model_->evaluate(inputs, labels);
  });
  loss_sum = model_->sum_over_stages(loss_sum);  // under PP only the last stage's ranks held a loss
  // Every dp rank evaluated its own shard of the validation windows, and under CP each cp rank
  // its chunks of them: losses add up over dp x cp, the windows' tokens (counted whole) over dp.
  auto loss_total = torch::tensor(loss_sum, torch::kDouble), token_total = torch::tensor(double(tokens), torch::kDouble);
  dist_->batch_group()->all_reduce(loss_total, distributed::ReduceOp::kSum);
  dp_group_->all_reduce(token_total, distributed::ReduceOp::kSum);
  loss_sum = loss_total.item<double>();
  tokens = int64_t(token_total.item<double>());
  double loss = loss_sum / double(std::max<int64_t>(tokens, 1));
  metrics_->log_validation(step_, loss, tokens);
  checkpointer_->record_validation_loss(step_, loss);
  return loss;
}

std::map<std::string, StateDict> Trainer::state_dicts() const {
  StateDict model;
  for (const auto& [fqn, p] : model_->trained_parameters()) model[fqn] = p;
  for (const auto& [fqn, b] : model_->saved_buffers()) model[fqn] = b;
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
  auto model = model_->shard_layouts();
  if (model.empty()) return {};  // every tensor is whole
  return {{"model", model}, {"optimizer", optimizer_->state_layouts(model)}};
}

void Trainer::load_state_dicts(const std::map<std::string, StateDict>& state) {
  auto part = [&](const std::string& name) -> const StateDict& {
    auto it = state.find(name);
    if (it == state.end()) throw std::logic_error(fmt::format("trainer: the loaded state has no '{}' part", name));
    return it->second;
  };
  {
    torch::NoGradGuard no_grad;
    for (auto& [fqn, p] : model_->trained_parameters()) p.copy_(require_state(part("model"), fqn));
    for (auto& [fqn, b] : model_->saved_buffers()) b.copy_(require_state(part("model"), fqn));
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
