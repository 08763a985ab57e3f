#include "ctitan/ps/embedding_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ctitan/ps/server_parts.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/state_dict_wire.h"
#include "ctitan/components/adamw.h"

namespace ctitan::ps {
namespace {

constexpr const char* kTrainersPart = "ps_trainers";

}  // namespace

EmbeddingServer::EmbeddingServer(config::JobConfig config, PsLayout layout)
    : config_(std::move(config)), layout_(layout), model_(build_seeded_model(config_)) {
  // One rank writes the whole state: the trainers' parts arrive by RPC when a save is due.
  checkpointer_ = std::make_unique<checkpoint::CheckpointManager>(config_, checkpoint::local_coordinator(), nullptr,
                                                                  checkpoint::RankPlace{0, 1, 0, 1}, *this);
  if (model_.job.tokenizer) checkpointer_->expect_tokenizer(model_.job.tokenizer->fingerprint());
  schedule_ = std::make_unique<components::LrScheduler>(config_.lr_scheduler, config_.training.steps, config_.optimizer.lr);
  checkpointer_->load();
  backward_done_ = std::make_shared<GradientRound>(layout_.trainers(), step_ + 1, "gradient");
  round_ = std::make_shared<GradientRound>(layout_.trainers(), step_ + 1, "report");
  metrics_ = make_server_metrics(config_, model_, layout_, stats_, step_);
  checkpointer_->set_before_save([this] { metrics_->sync(); });
  spdlog::info("ps: dist_autograd server of {} trainer{}: owns tok_embeddings ({} x {}), {} steps", layout_.trainers(),
               layout_.trainers() == 1 ? "" : "s", model_.job.args.vocab_size, model_.job.args.dim, config_.training.steps);
}

rpc::RRef EmbeddingServer::embedding() {
  std::lock_guard lock(mutex_);
  if (!weight_.valid()) weight_ = rpc::RRef::local(model_.model->tok_embeddings->weight);
  return weight_;
}

void EmbeddingServer::release() {
  std::lock_guard lock(mutex_);
  weight_ = rpc::RRef();
}

std::tuple<int64_t, WireState, WireState, WireState, WireState> EmbeddingServer::start(int64_t rank) {
  if (rank < 1 || rank > layout_.trainers()) {
    throw std::runtime_error(fmt::format("ps.start from rank {}, which is not a trainer (1..{})", rank, layout_.trainers()));
  }
  // Written before init_rpc (resume) and only read here.
  auto state = trainer_states_.find(int(rank));
  auto loader = loader_states_.find(int(rank));
  const TrainerState none;
  const auto& t = state == trainer_states_.end() ? none : state->second;
  return {step_, rpc::to_wire(t.model), rpc::to_wire(t.optimizer), rpc::to_wire(t.lr_scheduler),
          rpc::to_wire(loader == loader_states_.end() ? StateDict{} : loader->second)};
}

std::map<std::string, StateDict> EmbeddingServer::assemble(const std::map<int, TrainerState>& trainers) const {
  std::map<std::string, StateDict> parts;
  StateDict others;
  for (const auto& [rank, t] : trainers) {
    if (rank == 1) {
      parts["model"] = t.model;
      parts["model"][kEmbedding] = model_.model->tok_embeddings->weight;
      parts["optimizer"] = t.optimizer;
      parts["lr_scheduler"] = t.lr_scheduler;
      continue;
    }
    for (const auto& [part, dict] : {std::pair{"model", &t.model}, std::pair{"optimizer", &t.optimizer},
                                     std::pair{"lr_scheduler", &t.lr_scheduler}}) {
      for (const auto& [key, tensor] : *dict) others[fmt::format("{}.{}.{}", trainer_name(rank), part, key)] = tensor;
    }
  }
  if (!others.empty()) parts[kTrainersPart] = others;
  parts["dataloader"] = merge_per_trainer(loader_states_);
  parts["train_state"] = {{"step", scalar_state(step_)}, {"ntokens_seen", scalar_state(ntokens_seen_)}};
  return parts;
}

std::map<std::string, StateDict> EmbeddingServer::state_dicts() const {
  std::vector<rpc::Future> calls;
  for (int rank = 1; rank <= layout_.trainers(); ++rank) calls.push_back(rpc::rpc_async(trainer_name(rank), "ps.trainer_state"));
  std::map<int, TrainerState> trainers;
  for (int rank = 1; rank <= layout_.trainers(); ++rank) {
    auto [model, optimizer, lr] = calls[size_t(rank - 1)].value_as<TrainerStateWire>();
    trainers[rank] = {rpc::from_wire(model), rpc::from_wire(optimizer), rpc::from_wire(lr)};
  }
  return assemble(trainers);
}

std::map<std::string, StateDict> EmbeddingServer::load_targets() const {
  std::vector<std::pair<std::string, torch::Tensor>> copies;
  TrainerState shape;
  for (const auto& [fqn, p] : model_.named_params) {
    copies.emplace_back(fqn, p.detach().clone());
    if (fqn != kEmbedding) shape.model[fqn] = copies.back().second;
  }
  shape.optimizer = components::AdamW(copies, {}).state_dict();
  shape.lr_scheduler = schedule_->state_dict();
  std::map<int, TrainerState> trainers;
  for (int rank = 1; rank <= layout_.trainers(); ++rank) {
    auto& t = trainers[rank];
    for (const auto& [part, from, to] : {std::tuple{"model", &shape.model, &t.model},
                                         std::tuple{"optimizer", &shape.optimizer, &t.optimizer},
                                         std::tuple{"lr_scheduler", &shape.lr_scheduler, &t.lr_scheduler}}) {
      for (const auto& [key, tensor] : *from) (*to)[key] = tensor.clone();
    }
  }
  return assemble(trainers);
}

void EmbeddingServer::load_state_dicts(const std::map<std::string, StateDict>& parts) {
  {
    torch::NoGradGuard no_grad;
    model_.model->tok_embeddings->weight.copy_(require_state(parts.at("model"), kEmbedding));
  }
  step_ = require_state(parts.at("train_state"), "step").item<int64_t>();
  ntokens_seen_ = require_state(parts.at("train_state"), "ntokens_seen").item<int64_t>();
  loader_states_ = trainer_loader_states(parts.at("dataloader"), layout_.trainers(), step_);
  // Trainer 1 under ctitan train's keys; the others "trainer<r>.<part>.<key>".
  trainer_states_[1] = {parts.at("model"), parts.at("optimizer"), parts.at("lr_scheduler")};
  trainer_states_[1].model.erase(kEmbedding);
  if (parts.count(kTrainersPart)) {
    for (auto& [rank, state] : split_per_trainer(parts.at(kTrainersPart), layout_.trainers(), kTrainersPart)) {
      auto& t = trainer_states_[rank];
      for (const auto& [key, tensor] : state) {
        const auto dot = key.find('.');
        const std::string part = key.substr(0, dot), rest = key.substr(dot + 1);
        (part == "model" ? t.model : part == "optimizer" ? t.optimizer : t.lr_scheduler)[rest] = tensor;
      }
    }
  }
  spdlog::info("ps: resumed at step {}", step_);
}

void EmbeddingServer::validate() {
  // Trainer 1's model, the one its checkpoints save under ctitan train's keys: its own parameters
  // (fetched while it waits in its report, after every trainer's update of this step) around this
  // server's embedding. The server's copies of those parameters serve nothing else.
  auto [model, optimizer, lr] = rpc::rpc_async(trainer_name(1), "ps.trainer_state").value_as<TrainerStateWire>();
  const auto params = rpc::from_wire(model);
  {
    torch::NoGradGuard no_grad;
    for (auto& [fqn, p] : model_.named_params) {
      if (fqn != kEmbedding) p.copy_(require_state(params, fqn));
    }
  }
  run_validation(config_, layout_, model_, *metrics_, step_);
}

void EmbeddingServer::run() {
  auto holds = watch_trainers({backward_done_, round_}, layout_.trainers());
  const auto& t = config_.training;
  spdlog::info("ps: training steps {} .. {}", step_ + 1, t.steps);
  metrics_->start_window();
  while (step_ < t.steps) {
    backward_done_->wait_full(config_.ps.round_timeout_seconds);
    backward_done_->finish(torch::zeros({0}));
    // Each trainer has stepped (its DistributedOptimizer updated the embedding here and its own
    // parameters there) and waits in its report until the round finishes.
    auto reports = round_->wait_full(config_.ps.round_timeout_seconds);
    ++step_;
    int64_t tokens = 0;
    double grad_norm = 0;
    for (auto& r : reports) {
      tokens += r.tokens;
      grad_norm = std::max(grad_norm, r.grad_norm);
      stats_.add_latency(r.last_latency_s);
      stats_.add_bytes(r.rpc_bytes);
      loader_states_[r.rank] = std::move(r.loader_state);
    }
    ntokens_seen_ += tokens;
    metrics_->record_step(tokens, 0);
    if (step_ % config_.metrics.log_freq == 0 || step_ == t.steps) {
      auto [loss, max_loss] = round_losses(reports);
      // The lr the trainers stepped with (each runs the same schedule).
      metrics_->log(step_, loss, max_loss, torch::tensor(grad_norm, torch::kDouble),
                    config_.optimizer.lr * schedule_->factor(step_ - 1), {{model_.model->tok_embeddings->weight}, {}});
    }
    if (config_.validation.enable && (step_ % config_.validation.freq == 0 || step_ == t.steps)) validate();
    // While the trainers wait: a checkpoint of this step sees them all after it.
    const bool stop = checkpointer_->after_step(step_, step_ == t.steps);
    round_->finish(torch::zeros({0}));
    if (stop) {
      throw std::runtime_error(fmt::format("ps: stopped by SIGTERM after step {} (its checkpoint is saved)", step_));
    }
  }
  checkpointer_->finish();
  for (auto& hold : holds) hold.wait();
  metrics_->log_summary();
  metrics_->flush();
}

}  // namespace ctitan::ps
