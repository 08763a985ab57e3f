#pragma once
// The server of `ctitan ps --ps.mode dist_autograd` (rank 0), PyTorch's parameter-server
// tutorial: it owns the token embedding behind an RRef; trainers look tokens up through it
// (ps.embed) inside their distributed autograd context, so their backward reaches the embedding
// here, and their DistributedOptimizer steps it here.
#include <torch/torch.h>

#include <mutex>

#include "ctitan/config/job_config.h"
#include "ctitan/ps/model_setup.h"
#include "ctitan/ps/ps_config.h"
#include "ctitan/rpc/rref.h"

namespace ctitan::ps {

class EmbeddingServer {
 public:
  EmbeddingServer(const config::JobConfig& config, PsLayout layout);

  // ps.embedding: an RRef to the embedding weight (vocab, dim), a leaf that requires grad. Made
  // at the first call: an RRef needs the running agent.
  rpc::RRef embedding();

  // After init_rpc: serves until every trainer is done; throws one line naming a lost trainer.
  void run();
  // Drops the server's own reference before the graceful shutdown.
  void release();

 private:
  PsLayout layout_;
  SeededModel model_;
  std::mutex mutex_;
  rpc::RRef weight_;
};

}  // namespace ctitan::ps
