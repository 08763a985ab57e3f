#include "ctitan/ps/autograd_trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>

#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/metrics/peak_flops.h"
#include "ctitan/models/llama/flops.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/dist_autograd.h"
#include "ctitan/rpc/dist_optimizer.h"
#include "ctitan/train/autocast.h"
#include "ctitan/train/loss.h"

namespace ctitan::ps {

AutogradTrainer::AutogradTrainer(config::JobConfig config, PsLayout layout)
    : config_(std::move(config)), layout_(layout), model_(build_seeded_model(config_)),
      bf16_(config_.training.mixed_precision_param == torch::kBFloat16) {
  const auto& t = config_.training;
  loader_ = make_trainer_loader(config_, model_, layout_);
  lr_scheduler_ = std::make_unique<train::LrScheduler>(config_.lr_scheduler, t.steps, config_.optimizer.lr);
  metrics::MetricsSetup setup;
  setup.flops_per_token = models::llama::flops_per_token(model_.args, t.seq_len);
  setup.peak_flops =
      metrics::resolve_peak_flops(config_.metrics.peak_flops, bf16_ ? torch::kBFloat16 : torch::kFloat).flops;
  setup.memory_capacity_bytes = metrics::physical_memory_bytes() / layout_.world_size;
  if (config_.metrics.enable_jsonl && layout_.rank == 1) {
    setup.jsonl_path = (std::filesystem::path(config_.job.dump_folder) / "metrics.jsonl").string();
    metrics::prepare_metrics_file(setup.jsonl_path, 0);
  }
  metrics_ = std::make_unique<metrics::MetricsProcessor>(std::move(setup));
}

void AutogradTrainer::run() {
  namespace dist_autograd = rpc::dist_autograd;
  auto& model = *model_.model;
  const auto& t = config_.training;
  {
    auto weight = rpc::rpc_async(server_name(), "ps.embedding").value_as<rpc::RRef>();
    // The model calls tok_embeddings through its hooks: the lookup runs on the server instead.
    model.hooks.set_around(*model.tok_embeddings, [weight](const torch::Tensor& tokens, const auto&) {
      return rpc::rpc_sync(server_name(), "ps.embed", weight, tokens).toTensor();  // (B, T, dim)
    });
    std::vector<rpc::RRef> params{weight};
    std::vector<torch::Tensor> local;  // every parameter but the embedding
    for (const auto& [name, p] : model_.named_params) {
      if (name.rfind("tok_embeddings.", 0) == 0) continue;
      params.push_back(rpc::RRef::local(p));
      local.push_back(p);
    }
    const auto& o = config_.optimizer;
    c10::Dict<std::string, double> options;
    options.insert("beta1", o.beta1);
    options.insert("beta2", o.beta2);
    options.insert("eps", o.eps);
    options.insert("weight_decay", o.weight_decay);
    rpc::DistributedOptimizer optimizer("adamw", params, options);
    spdlog::info("ps: {} trains steps 1 .. {} (dist_autograd: tok_embeddings on the server)",
                 trainer_name(layout_.rank), t.steps);
    metrics_->start_window();
    for (int64_t step = 1; step <= t.steps; ++step) {
      auto batch = loader_->next();  // inputs, labels: (B, T) int64
      dist_autograd::Context context;
      torch::Tensor loss;
      {
        train::AutocastGuard autocast(bf16_, torch::kCPU);
        auto logits = model.forward(batch.inputs);  // (B, T, vocab)
        // This trainer's tokens only: each trainer steps on its own batch (with one trainer,
        // exactly one process's loss).
        auto tokens = train::count_valid_tokens(batch.labels).clamp_min(1).to(torch::kFloat);
        loss = train::summed_cross_entropy(logits, batch.labels) / tokens;
      }
      dist_autograd::backward(context, {loss});
      // The norm over both owners' gradients, then clip as train::clip_grad_norm does.
      const double norm = std::sqrt(optimizer.grad_sq_norm(context));
      if (!std::isfinite(norm)) {
        throw std::runtime_error(fmt::format("ps: step {}: the gradient norm is {} (a non-finite loss or gradient)",
                                             step, norm));
      }
      const double max_norm = t.max_norm;
      const double scale = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
      optimizer.step(context, lr_scheduler_->current_lr(), scale);
      lr_scheduler_->step();
      metrics_->record_step(batch.inputs.numel(), 0);
      if (step % config_.metrics.log_freq == 0 || step == t.steps) {
        auto grad_norm = torch::tensor(float(norm));
        auto detached = loss.detach();
        metrics_->log(step, detached, detached, grad_norm, config_.optimizer.lr * lr_scheduler_->factor(step - 1),
                      {local, {}});
      }
    }
    model.hooks.clear();  // the hook holds an RRef
  }
  metrics_->log_summary();
  metrics_->flush();
  done_.set_value(true);
}

}  // namespace ctitan::ps
