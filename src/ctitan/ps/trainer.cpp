#include "ctitan/ps/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "ctitan/ps/flat_params.h"
#include "ctitan/ps/ps_functions.h"
#include "ctitan/rpc/state_dict_wire.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/errors.h"
#include "ctitan/components/autocast.h"
#include "ctitan/components/loss.h"

namespace ctitan::ps {

GradientTrainer::GradientTrainer(config::JobConfig config, PsLayout layout)
    : config_(std::move(config)), layout_(layout), model_(build_seeded_model(config_)),
      microbatches_(microbatches_per_step(config_, layout_.trainers())),
      bf16_(config_.training.mixed_precision_param == torch::kBFloat16) {
  loader_ = make_trainer_loader(config_, model_, layout_);
}

std::pair<double, int64_t> GradientTrainer::forward_backward() {
  for (auto& p : model_.params) p.mutable_grad() = torch::Tensor();
  auto loss_sum = torch::zeros({}, torch::kFloat);
  int64_t tokens = 0;
  for (int64_t i = 0; i < microbatches_; ++i) {
    auto batch = loader_->next();  // inputs, labels: (B, T) int64
    torch::Tensor loss;
    {
      components::AutocastGuard autocast(bf16_, torch::kCPU);
      auto logits = model_.model->forward(batch.inputs);  // (B, T, vocab)
      // Summed, not averaged: only the server knows the round's token count to divide by.
      loss = components::summed_cross_entropy(logits, batch.labels);
    }
    loss.backward();
    loss_sum += loss.detach();
    tokens += components::count_valid_tokens(batch.labels).item<int64_t>();
  }
  return {loss_sum.item<double>(), tokens};
}

void GradientTrainer::run() {
  const std::string me = trainer_name(layout_.rank);
  auto [step, params, loader_state] =
      rpc::rpc_async(server_name(), "ps.join", int64_t(layout_.rank))
          .value_as<std::tuple<int64_t, torch::Tensor, c10::Dict<std::string, at::Tensor>>>();
  unflatten_into(params, model_.params, server_name());
  // A resumed server hands back where this trainer's slice of the data stood at its checkpoint.
  if (!loader_state.empty()) loader_->load_state_dict(rpc::from_wire(loader_state));
  // A push waits for the whole round: the slowest trainer and the update. The server fails a
  // round first (ps.round_timeout_seconds, naming who is missing); this bound only ends a
  // trainer whose server stopped answering without dying.
  const rpc::CallOptions push_options{.timeout_seconds = 2 * config_.ps.round_timeout_seconds + 60};
  double last_latency_s = -1;
  spdlog::info("ps: {} trains steps {} .. {} ({} microbatch{} of {} rows per step)", me, step + 1,
               config_.training.steps, microbatches_, microbatches_ == 1 ? "" : "es", config_.training.local_batch_size);
  while (step < config_.training.steps) {
    auto [loss_sum, tokens] = forward_backward();
    auto grads = flatten_grads(model_.params);  // (numel,) fp32
    const auto start = std::chrono::steady_clock::now();
    auto reply = rpc::rpc_async(server_name(), "ps.push", int64_t(layout_.rank), step + 1, grads, tokens, loss_sum,
                                last_latency_s, rpc::to_wire(loader_->state_dict()), push_options);
    torch::Tensor fresh;  // (numel,) fp32: the parameters after step + 1
    try {
      fresh = reply.value_as<torch::Tensor>();
    } catch (const rpc::RpcError& e) {
      pause_if_server_lost(e);
      throw;
    }
    last_latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    unflatten_into(fresh, model_.params, server_name());
    ++step;
  }
  done_.set_value(true);
}

}  // namespace ctitan::ps
