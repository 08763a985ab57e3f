// `ctitan ps --config FILE [--section.key value ...]` under `ctitan run --nproc-per-node N`: the
// batched parameter server (docs/RPC.md). Rank 0 serves, ranks 1..N-1 train.
#include <spdlog/spdlog.h>

#include "ctitan/cli/commands.h"
#include "ctitan/distributed/dist_env.h"
#include "ctitan/metrics/memory_tracker.h"
#include "ctitan/ps/autograd_trainer.h"
#include "ctitan/ps/embedding_server.h"
#include "ctitan/ps/ps_config.h"
#include "ctitan/ps/ps_functions.h"
#include "ctitan/ps/server.h"
#include "ctitan/ps/trainer.h"
#include "ctitan/rpc/agent.h"

namespace ctitan::cli {
namespace {

// Shuts the agent down on every way out: graceful after a run that ended well (every process
// waits for the others), non-graceful when an exception unwinds (a peer may be gone, and the
// error line must come out now, not after a barrier that never completes).
class RpcRuntime {
 public:
  RpcRuntime(const std::string& name, const rpc::RpcOptions& options) { rpc::init_rpc(name, options); }
  ~RpcRuntime() {
    if (!graceful_) rpc::shutdown(/*graceful=*/false);
  }
  void shutdown() {
    rpc::shutdown();
    graceful_ = true;
  }

 private:
  bool graceful_ = false;
};

// Unsets this process's RPC handlers before the objects they reach are destroyed.
struct ServeScope {
  explicit ServeScope(ps::Endpoints endpoints) { ps::serve(std::move(endpoints)); }
  ~ServeScope() { ps::serve({}); }
};

// --ps.mode dist_autograd: rank 0 owns the embedding, the trainers run the rest.
void run_dist_autograd(config::JobConfig config, const ps::PsLayout& layout, const rpc::RpcOptions& options) {
  if (layout.is_server()) {
    ps::EmbeddingServer server(std::move(config), layout);
    ServeScope serving({.embedding = [&] { return server.embedding(); },
                        .start = [&](int64_t rank) { return server.start(rank); },
                        .ready = [&](ps::Push ready) { return server.ready(std::move(ready)); },
                        .report = [&](ps::Push report) { return server.report(std::move(report)); }});
    RpcRuntime runtime(ps::server_name(), options);
    server.run();
    server.release();
    runtime.shutdown();
  } else {
    ps::AutogradTrainer trainer(std::move(config), layout);
    ServeScope serving({.hold = [&] { return trainer.hold(); }, .trainer_state = [&] { return trainer.state(); }});
    RpcRuntime runtime(ps::trainer_name(layout.rank), options);
    trainer.run();
    runtime.shutdown();
  }
}

void run_ps(config::JobConfig config) {
  const auto env = distributed::read_dist_env();
  const auto layout = ps::validate_ps_config(config, env.rank, env.world_size);
  metrics::install_memory_tracker();
  ps::register_ps_functions();
  rpc::RpcOptions options;
  options.init_timeout_seconds = double(config.comm.init_timeout_seconds);
  // Each trainer holds one push (blocking a pool thread only until its handler returns) and
  // the server one hold per trainer: a small pool is enough and spares the cores.
  options.num_worker_threads = 4;
  if (config.ps.mode == config::PsMode::kDistAutograd) {
    run_dist_autograd(std::move(config), layout, options);
  } else if (layout.is_server()) {
    ps::ParameterServer server(std::move(config), layout);
    ServeScope serving({.join = [&](int64_t rank) { return server.join(rank); },
                        .push = [&](ps::Push p) { return server.push(std::move(p)); }});
    RpcRuntime runtime(ps::server_name(), options);
    server.run();
    runtime.shutdown();
  } else {
    ps::GradientTrainer trainer(std::move(config), layout);
    ServeScope serving({.hold = [&] { return trainer.hold(); }});
    RpcRuntime runtime(ps::trainer_name(layout.rank), options);
    trainer.run();
    runtime.shutdown();
  }
}

}  // namespace

void add_ps_command(CLI::App& app) {
  add_job_subcommand(
      app, "ps", "Parameter server: run as `ctitan run --nproc-per-node N ps --config FILE`; rank 0 serves, 1..N-1 train",
      [](config::JobConfig config) { run_ps(std::move(config)); });
}

}  // namespace ctitan::cli
