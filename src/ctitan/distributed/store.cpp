#include "ctitan/distributed/store.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "ctitan/common/error.h"
#include "ctitan/distributed/c10d_quiet.h"

namespace ctitan::distributed {

c10::intrusive_ptr<c10d::Store> connect_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = uint16_t(env.master_port);
  options.isServer = !env.agent_store && env.rank == 0;
  options.numWorkers = env.agent_store ? c10::nullopt : c10::optional<size_t>(size_t(env.world_size));
  options.waitWorkers = false;
  options.timeout = timeout;
  // c10d would retry an unresolvable name until the timeout, logging each attempt.
  if (auto why = host_resolution_error(env.master_addr); !why.empty()) {
    throw InputError(fmt::format("rendezvous error: rank {} cannot resolve MASTER_ADDR '{}': {}", env.rank,
                                 env.master_addr, why));
  }
  c10::intrusive_ptr<c10d::Store> store;
  try {
    QuietC10dLogs quiet;  // the exception below becomes the one line; c10d's retries are not shown
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (options.isServer && what.find("in use") != std::string::npos) {
      throw InputError(fmt::format("rendezvous error: rank 0 cannot serve the store on port {}: the address is in use "
                                   "(another process serves it: is RANK 0 given twice, or is --master-port taken?)",
                                   env.master_port));
    }
    throw InputError(fmt::format("rendezvous error: rank {} could not reach the store at {}:{} within {}s: {}",
                                 env.rank, env.master_addr, env.master_port, timeout.count() / 1000,
                                 std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
  }
  store->setTimeout(timeout);
  return c10::make_intrusive<c10d::PrefixStore>(fmt::format("round{}", env.restart_count), store);
}

}  // namespace ctitan::distributed
