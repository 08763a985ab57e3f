#include "ctitan/ps/autograd_trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "ctitan/rpc/api.h"
#include "ctitan/rpc/dist_autograd.h"
#include "ctitan/rpc/state_dict_wire.h"
#include "ctitan/components/autocast.h"
#include "ctitan/components/loss.h"

namespace ctitan::ps {
namespace {

const std::vector<std::string> kAdamWFields = {"exp_avg", "exp_avg_sq", "step"};

}  // namespace

AutogradTrainer::AutogradTrainer(config::JobConfig config, PsLayout layout)
    : config_(std::move(config)), layout_(layout), model_(build_seeded_model(config_)),
      bf16_(config_.training.mixed_precision_param == torch::kBFloat16) {
  loader_ = make_trainer_loader(config_, model_, layout_);
  lr_scheduler_ = std::make_unique<components::LrScheduler>(config_.lr_scheduler, config_.training.steps, config_.optimizer.lr);
}

TrainerStateWire AutogradTrainer::state() {
  if (!optimizer_) throw std::runtime_error("ps.trainer_state before the trainer's first step");
  StateDict model;
  for (const auto& [fqn, p] : model_.named_params) {
    if (fqn != kEmbedding) model[fqn] = p.detach();
  }
  // components::AdamW's keys, as `ctitan train`'s checkpoints hold them.
  StateDict optimizer;
  auto per_param = optimizer_->state_dict();
  for (size_t i = 0; i < per_param.size(); ++i) {
    for (const auto& [field, tensor] : per_param[i]) optimizer[fmt::format("state.{}.{}", optimizer_fqns_[i], field)] = tensor;
  }
  return {rpc::to_wire(model), rpc::to_wire(optimizer), rpc::to_wire(lr_scheduler_->state_dict())};
}

void AutogradTrainer::load(const WireState& model, const WireState& optimizer, const WireState& lr,
                           const WireState& loader) {
  const auto params = rpc::from_wire(model), moments = rpc::from_wire(optimizer);
  {
    torch::NoGradGuard no_grad;
    for (auto& [fqn, p] : model_.named_params) {
      if (fqn != kEmbedding) p.copy_(require_state(params, fqn));
    }
  }
  std::vector<StateDict> per_param(optimizer_fqns_.size());
  for (size_t i = 0; i < optimizer_fqns_.size(); ++i) {
    for (const auto& field : kAdamWFields) {
      per_param[i][field] = require_state(moments, fmt::format("state.{}.{}", optimizer_fqns_[i], field));
    }
  }
  optimizer_->load_state_dict(per_param);
  lr_scheduler_->load_state_dict(rpc::from_wire(lr));
  loader_->load_state_dict(rpc::from_wire(loader));
}

void AutogradTrainer::run() {
  try {
    run_steps();
  } catch (const std::exception& e) {
    pause_if_server_lost(e);
    throw;
  }
  done_.set_value(true);
}

void AutogradTrainer::run_steps() {
  namespace dist_autograd = rpc::dist_autograd;
  auto& model = *model_.model;
  const auto& t = config_.training;
  {
    auto weight = rpc::rpc_async(server_name(), "ps.embedding").value_as<rpc::RRef>();
    // The model calls tok_embeddings through its hooks: the lookup runs on the server instead,
    // timed and counted for the server's metrics (ids out, vectors back, and in backward their
    // gradient out, of the vectors' shape and dtype).
    double lookup_latency_s = -1;
    int64_t lookup_bytes = 0;
    model.hooks.set_around(*model.tok_embeddings, [&, weight](const torch::Tensor& tokens, const auto&) {
      const auto start = std::chrono::steady_clock::now();
      auto vectors = rpc::rpc_sync(server_name(), "ps.embed", weight, tokens).toTensor();  // (B, T, dim)
      lookup_latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      lookup_bytes += int64_t(tokens.nbytes() + 2 * vectors.nbytes());  // over the step's microbatches
      return vectors;
    });
    std::vector<rpc::RRef> params{weight};
    optimizer_fqns_ = {kEmbedding};
    for (const auto& [name, p] : model_.named_params) {
      if (name == kEmbedding) continue;
      params.push_back(rpc::RRef::local(p));
      optimizer_fqns_.push_back(name);
    }
    const auto& o = config_.optimizer;
    c10::Dict<std::string, double> options;
    options.insert("beta1", o.beta1);
    options.insert("beta2", o.beta2);
    options.insert("eps", o.eps);
    options.insert("weight_decay", o.weight_decay);
    optimizer_ = std::make_unique<rpc::DistributedOptimizer>("adamw", params, options);
    auto [step, model_state, optimizer_state, lr_state, loader_state] =
        rpc::rpc_async(server_name(), "ps.start", int64_t(layout_.rank))
            .value_as<std::tuple<int64_t, WireState, WireState, WireState, WireState>>();
    if (step > 0) load(model_state, optimizer_state, lr_state, loader_state);
    spdlog::info("ps: {} trains steps {} .. {} (dist_autograd: tok_embeddings on the server)",
                 trainer_name(layout_.rank), step + 1, t.steps);
    // The server fails a round first (ps.round_timeout_seconds, naming who is missing); this bound
    // only ends a trainer whose server stopped answering without dying.
    const rpc::CallOptions report_options{.timeout_seconds = 2 * config_.ps.round_timeout_seconds + 60};
    const int64_t microbatches = microbatches_per_step(config_, layout_.trainers());
    for (++step; step <= t.steps; ++step) {
      std::vector<data::Batch> batches;  // inputs, labels: (B, T) int64 each
      int64_t tokens = 0;
      for (int64_t i = 0; i < microbatches; ++i) {
        batches.push_back(loader_->next());
        tokens += components::count_valid_tokens(batches.back().labels).item<int64_t>();
      }
      // This trainer's tokens only: each trainer steps on its own batch (with one trainer, one
      // process's token-weighted loss over the same global batch).
      const auto denominator = torch::tensor(float(std::max<int64_t>(tokens, 1)));
      auto summed = torch::zeros({}, torch::kFloat);  // summed token losses, read once at the report
      lookup_bytes = 0;
      for (const auto& batch : batches) {
        // A context per microbatch, its gradients summed on the owners: a second forward in one
        // context would not complete its backward (DistributedOptimizer::accumulate).
        dist_autograd::Context context;
        torch::Tensor loss;
        {
          components::AutocastGuard autocast(bf16_, torch::kCPU);
          auto logits = model.forward(batch.inputs);  // (B, T, vocab)
          loss = components::summed_cross_entropy(logits, batch.labels);
        }
        summed += loss.detach();
        dist_autograd::backward(context, {loss / denominator});
        optimizer_->accumulate(context);
      }
      // The norm over both owners' gradients, then clip as components::clip_grad_norm does.
      const double norm = std::sqrt(optimizer_->grad_sq_norm());
      if (!std::isfinite(norm)) {
        throw std::runtime_error(fmt::format("ps: step {}: the gradient norm is {} (a non-finite loss or gradient)",
                                             step, norm));
      }
      // Every trainer's forward of this step has read the embedding: updates may begin.
      rpc::rpc_async(server_name(), "ps.ready", int64_t(layout_.rank), step, report_options).wait();
      const double max_norm = t.max_norm;
      const double scale = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
      optimizer_->step(lr_scheduler_->current_lr(), scale);
      lr_scheduler_->step();
      // Waits for every trainer's report of this step (and the server's checkpoint, if due).
      rpc::rpc_async(server_name(), "ps.report", int64_t(layout_.rank), step, tokens, summed.item<double>(), norm,
                     lookup_latency_s, lookup_bytes, rpc::to_wire(loader_->state_dict()), report_options)
          .wait();
    }
    model.hooks.clear();  // the hook holds an RRef
    optimizer_.reset();   // and the optimizer RRefs to its owners' optimizers
  }
}

}  // namespace ctitan::ps
