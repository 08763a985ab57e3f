#include "ctitan/distributed/dist_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "ctitan/common/error.h"
#include "ctitan/common/message_text.h"

namespace ctitan::distributed {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::optional<std::string>(v) : std::nullopt;
}

// The whole of `text` as an int, or nothing (out of range included).
std::optional<int> parse_int(const std::string& text) {
  try {
    size_t used = 0;
    int parsed = std::stoi(text, &used);
    if (used == text.size()) return parsed;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

int env_int(const char* name, int fallback) {
  auto v = env(name);
  if (!v) return fallback;
  if (auto parsed = parse_int(*v)) return *parsed;
  throw InputError(fmt::format("launcher error: environment variable {}='{}' is not an integer", name, one_line(*v)));
}

// Slurm lists the tasks of each node of the job with runs compressed: SLURM_TASKS_PER_NODE
// "2(x3),1" is 2, 2, 2, 1. This node's count is the entry at SLURM_NODEID.
int slurm_tasks_on_node(const std::string& list, int node) {
  const auto malformed = [&](const std::string& why) {
    return InputError(fmt::format("launcher error: environment variable SLURM_TASKS_PER_NODE='{}' {}", one_line(list), why));
  };
  int64_t first = 0;  // the index of the item's first node
  std::optional<int> on_node;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, end - at);
    const size_t paren = item.find("(x");
    const auto count = parse_int(item.substr(0, paren));
    std::optional<int> repeat = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') throw malformed("is not a list of counts such as 2(x3),1");
      repeat = parse_int(item.substr(paren + 2, item.size() - paren - 3));
    }
    if (!count || !repeat || *count < 1 || *repeat < 1) throw malformed("is not a list of counts such as 2(x3),1");
    if (!on_node && node < first + *repeat) on_node = count;  // the rest is still checked
    first += *repeat;
    at = end + 1;
  }
  if (on_node) return *on_node;
  throw malformed(fmt::format("lists {} nodes; SLURM_NODEID={} is not one of them", first, node));
}

}  // namespace

DistEnv read_dist_env() {
  DistEnv e;
  if (env("RANK") || env("WORLD_SIZE")) {
    e.source = "torchrun";
    e.rank = env_int("RANK", 0);
    e.world_size = env_int("WORLD_SIZE", 1);
    e.local_rank = env_int("LOCAL_RANK", e.rank);
    e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size);
    e.group_rank = env_int("GROUP_RANK", 0);
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    e.source = "slurm";
    e.rank = env_int("SLURM_PROCID", 0);
    e.world_size = env_int("SLURM_NTASKS", 1);
    e.local_rank = env_int("SLURM_LOCALID", 0);
    e.group_rank = env_int("SLURM_NODEID", 0);
    if (env("SLURM_NTASKS_PER_NODE")) {
      e.local_world_size = env_int("SLURM_NTASKS_PER_NODE", 1);
    } else if (auto list = env("SLURM_TASKS_PER_NODE")) {
      if (e.group_rank < 0) {
        throw InputError(fmt::format("launcher error: environment variable SLURM_NODEID={} is negative", e.group_rank));
      }
      e.local_world_size = slurm_tasks_on_node(*list, e.group_rank);
    }
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    e.source = "openmpi";
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    e.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    e.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    e.group_rank = env_int("OMPI_COMM_WORLD_NODE_RANK", 0);
  }
  if (auto addr = env("MASTER_ADDR")) e.master_addr = *addr;
  e.master_port = env_int("MASTER_PORT", e.master_port);
  e.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  auto agent = env("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  if (e.world_size < 1 || e.rank < 0 || e.rank >= e.world_size) {
    throw InputError(fmt::format("launcher error: rank {} is outside world size {} (from {} variables)", e.rank,
                                 e.world_size, e.source));
  }
  // Processes per node divide memory and name devices: 0 would divide by zero later.
  // torchrun always exports LOCAL_WORLD_SIZE (its default here is the world); Slurm and Open MPI
  // only some of the time, their default of 1 being no bound on the local rank.
  const bool local_size_known = e.source == "torchrun" ||
                                (e.source == "slurm" && (env("SLURM_NTASKS_PER_NODE") || env("SLURM_TASKS_PER_NODE"))) ||
                                (e.source == "openmpi" && env("OMPI_COMM_WORLD_LOCAL_SIZE"));
  if (e.local_world_size < 1 || e.local_rank < 0 || (local_size_known && e.local_rank >= e.local_world_size)) {
    const char* size_var = e.source == "slurm"     ? (env("SLURM_NTASKS_PER_NODE") ? "SLURM_NTASKS_PER_NODE"
                                                                                : "SLURM_TASKS_PER_NODE")
                           : e.source == "openmpi" ? "OMPI_COMM_WORLD_LOCAL_SIZE"
                                                   : "LOCAL_WORLD_SIZE";
    throw InputError(fmt::format("launcher error: local rank {} with {}={} (from {} variables): a node runs at "
                                 "least one process, and local ranks run from 0 to that count - 1",
                                 e.local_rank, size_var, e.local_world_size, e.source));
  }
  if (e.master_port <= 0 || e.master_port > 65535) {
    throw InputError(fmt::format("launcher error: MASTER_PORT={} is not a valid port", e.master_port));
  }
  return e;
}

}  // namespace ctitan::distributed
