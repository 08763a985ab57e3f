#include "ctitan/ps/server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>

#include "ctitan/ps/flat_params.h"
#include "ctitan/ps/server_parts.h"
#include "ctitan/rpc/state_dict_wire.h"
#include "ctitan/rpc/api.h"
#include "ctitan/components/grad_clip.h"

namespace ctitan::ps {

ParameterServer::ParameterServer(config::JobConfig config, PsLayout layout)
    : config_(std::move(config)), layout_(layout), model_(build_seeded_model(config_)) {
  const auto& o = config_.optimizer;
  optimizer_ = std::make_unique<components::AdamW>(model_.named_params,
                                              components::AdamWOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
  lr_scheduler_ = std::make_unique<components::LrScheduler>(config_.lr_scheduler, config_.training.steps, o.lr);
  // One rank writes the whole state: the trainers hold nothing a resumed run needs but their
  // dataloader positions, which arrive with every push.
  checkpointer_ = std::make_unique<checkpoint::CheckpointManager>(config_, checkpoint::local_coordinator(), nullptr,
                                                                  checkpoint::RankPlace{0, 1, 0, 1}, *this);
  if (model_.job.tokenizer) checkpointer_->expect_tokenizer(model_.job.tokenizer->fingerprint());
  checkpointer_->load();
  round_ = std::make_shared<GradientRound>(layout_.trainers(), step_ + 1, "gradient");
  flat_params_ = flatten(model_.params);

  metrics_ = make_server_metrics(config_, model_, layout_, stats_, step_);
  // The rows of the steps a checkpoint covers are on disk before it commits.
  checkpointer_->set_before_save([this] { metrics_->sync(); });
  spdlog::info("ps: server of {} trainers; model {:.2f}M params ({} floats per push), {} steps",
               layout_.trainers(), double(total_numel(model_.params)) / 1e6, total_numel(model_.params),
               config_.training.steps);
}

std::tuple<int64_t, torch::Tensor, c10::Dict<std::string, at::Tensor>> ParameterServer::join(int64_t rank) {
  if (rank < 1 || rank > layout_.trainers()) {
    throw std::runtime_error(fmt::format("ps.join from rank {}, which is not a trainer (1..{})", rank, layout_.trainers()));
  }
  std::lock_guard lock(params_mutex_);
  auto loader = loader_states_.find(int(rank));
  return {step_, flat_params_, rpc::to_wire(loader == loader_states_.end() ? StateDict{} : loader->second)};
}

void ParameterServer::run() {
  holds_ = watch_trainers({round_}, layout_.trainers());
  try {
    run_steps();
  } catch (const std::exception& e) {
    checkpointer_->on_exception(step_, in_update_, e.what());
    throw;
  }
}

void ParameterServer::run_steps() {
  const auto& t = config_.training;
  spdlog::info("ps: training steps {} .. {}", step_ + 1, t.steps);
  metrics_->start_window();
  while (step_ < t.steps) {
    checkpointer_->step_starting(step_);
    // The first round includes every trainer's model build and first batch; later rounds one step.
    auto pushes = round_->wait_full(config_.ps.round_timeout_seconds);
    int64_t tokens = 0;
    for (const auto& p : pushes) tokens += p.tokens;
    in_update_ = true;
    auto grad_norm = update(pushes, tokens);
    ++step_;
    ntokens_seen_ += tokens;
    for (auto& p : pushes) loader_states_[p.rank] = std::move(p.loader_state);
    in_update_ = false;
    auto flat = flatten(model_.params);  // (numel,) fp32, sent to every trainer
    {
      std::lock_guard lock(params_mutex_);
      flat_params_ = flat;
    }
    for (const auto& p : pushes) {
      stats_.add_latency(p.last_latency_s);
      stats_.add_bytes(int64_t(p.grads.nbytes() + flat.nbytes()));
    }
    round_->finish(flat);
    metrics_->record_step(tokens, 0);
    if (step_ % config_.metrics.log_freq == 0 || step_ == t.steps) log_step(pushes, grad_norm);
    // The trainers compute the next step meanwhile; its round waits for this.
    if (config_.validation.enable && (step_ % config_.validation.freq == 0 || step_ == t.steps)) validate();
    if (checkpointer_->after_step(step_, step_ == t.steps)) {
      // SIGTERM: the checkpoint of this step is written; the trainers are left waiting for the
      // next round and fail when this process exits.
      throw std::runtime_error(fmt::format("ps: stopped by SIGTERM after step {} (its checkpoint is saved)", step_));
    }
  }
  checkpointer_->finish();
  // Every trainer completes its hold after its last round; then all shut down together.
  for (auto& hold : holds_) hold.wait();
  metrics_->log_summary();
  metrics_->flush();
}

torch::Tensor ParameterServer::update(const std::vector<Push>& pushes, int64_t tokens) {
  // In rank order, whatever order the pushes arrived in: the sum is the same bytes every run.
  auto grads = pushes.front().grads.clone();  // (numel,) fp32
  for (size_t i = 1; i < pushes.size(); ++i) grads += pushes[i].grads;
  // Each trainer's gradient is of its summed loss: divided by the round's tokens it is the
  // gradient of the token-weighted mean, as `ctitan train` divides by the global batch's tokens.
  grads.div_(double(std::max<int64_t>(tokens, 1)));
  assign_grads(grads, model_.params);
  auto grad_norm = components::clip_grad_norm(model_.params, config_.training.max_norm);
  const float norm = grad_norm.item<float>();
  if (!std::isfinite(norm)) {
    throw std::runtime_error(fmt::format("ps: step {}: the gradient norm is {} (a non-finite loss or gradient): "
                                         "training stopped before the update; lower optimizer.lr or "
                                         "training.max_norm, or check the data", step_ + 1, norm));
  }
  optimizer_->step(lr_scheduler_->current_lr());
  lr_scheduler_->step();
  return grad_norm;
}

std::map<std::string, StateDict> ParameterServer::state_dicts() const {
  return {
      {"model", StateDict(model_.named_params.begin(), model_.named_params.end())},
      {"optimizer", optimizer_->state_dict()},
      {"lr_scheduler", lr_scheduler_->state_dict()},
      {"dataloader", merge_per_trainer(loader_states_)},
      {"train_state", {{"step", scalar_state(step_)}, {"ntokens_seen", scalar_state(ntokens_seen_)}}},
  };
}

void ParameterServer::load_state_dicts(const std::map<std::string, StateDict>& state) {
  {
    torch::NoGradGuard no_grad;
    for (auto& [fqn, p] : model_.named_params) p.copy_(require_state(state.at("model"), fqn));
  }
  optimizer_->load_state_dict(state.at("optimizer"));
  lr_scheduler_->load_state_dict(state.at("lr_scheduler"));
  step_ = require_state(state.at("train_state"), "step").item<int64_t>();
  ntokens_seen_ = require_state(state.at("train_state"), "ntokens_seen").item<int64_t>();
  loader_states_ = trainer_loader_states(state.at("dataloader"), layout_.trainers(), step_);
  spdlog::info("ps: resumed at step {}", step_);
}

void ParameterServer::validate() { run_validation(config_, layout_, model_, *metrics_, step_); }

void ParameterServer::log_step(const std::vector<Push>& pushes, const torch::Tensor& grad_norm) {
  auto [loss, max_loss] = round_losses(pushes);
  metrics_->log(step_, loss, max_loss, grad_norm,
                config_.optimizer.lr * lr_scheduler_->factor(step_ - 1), {model_.params, optimizer_->state_dict()});
}

}  // namespace ctitan::ps
