#pragma once
// The RPC agent of this process: init_rpc starts upstream's TensorPipeAgent with ctitan's request
// handler, shutdown stops it. Once per process: upstream's RRef context is a process-wide
// singleton bound to the first agent, so a second init_rpc (even after shutdown) is refused.
#include <string>
#include <vector>

namespace ctitan::rpc {

struct RpcOptions {
  double timeout_seconds = 60;                            // default per-call timeout; 0 = none
  int num_worker_threads = 16;                            // the agent's pool (PyTorch's default)
  std::vector<std::string> channels = {"cma", "basic"};  // TensorPipe channels: 12 threads instead of 28
  double init_timeout_seconds = 300;                      // for the store, and the start/shutdown barriers
};

struct WorkerInfo {
  std::string name;
  int id = 0;  // the rank
};

// Rank, world size and the store come from the launcher's environment (distributed/dist_env.h);
// the overload takes rank and world size explicitly. `name` is 1..127 bytes of [A-Za-z0-9_:-]
// and unique among the workers. Every worker must call it; it returns when all are listening.
// Bad names, an unreachable store or a worker that never arrives are InputErrors.
void init_rpc(const std::string& name, const RpcOptions& options = {});
void init_rpc(const std::string& name, int rank, int world_size, const RpcOptions& options = {});

// Graceful (every worker calls it): waits until every worker reached shutdown and no call is in
// flight anywhere, then stops the agent. Non-graceful: stops this agent now; calls pending on it
// fail. Afterwards calls throw RpcError(Shutdown). A second shutdown does nothing.
void shutdown(bool graceful = true);

bool rpc_running();
WorkerInfo get_worker_info();                         // this worker
WorkerInfo get_worker_info(const std::string& name);  // InputError for an unknown name
std::vector<WorkerInfo> get_worker_infos();  // by rank

}  // namespace ctitan::rpc
