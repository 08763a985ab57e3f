#include "ctitan/ps/embedding_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ctitan/rpc/api.h"

namespace ctitan::ps {

EmbeddingServer::EmbeddingServer(const config::JobConfig& config, PsLayout layout)
    : layout_(layout), model_(build_seeded_model(config)) {
  spdlog::info("ps: dist_autograd server of {} trainer{}: owns tok_embeddings ({} x {})", layout_.trainers(),
               layout_.trainers() == 1 ? "" : "s", model_.args.vocab_size, model_.args.dim);
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

void EmbeddingServer::run() {
  std::vector<rpc::Future> holds;
  for (int rank = 1; rank <= layout_.trainers(); ++rank) {
    holds.push_back(rpc::rpc_async(trainer_name(rank), "ps.hold", rpc::CallOptions{.timeout_seconds = 0}));
  }
  for (int rank = 1; rank <= layout_.trainers(); ++rank) {
    try {
      holds[size_t(rank - 1)].wait();
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("ps: {} (rank {}) is gone: {}", trainer_name(rank), rank, e.what()));
    }
  }
}

}  // namespace ctitan::ps
