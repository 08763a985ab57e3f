// The launcher environment readers: the variables torchrun, `ctitan run`, Slurm and Open MPI set,
// as read_dist_env() reads them at the start of every rank. The input is one value per variable
// of kVariables, in order, separated by NUL bytes; an empty or missing value leaves the variable
// unset. An accepted environment must describe a place a process can be (rank in the world, local
// rank in the node where the node's size is known, a port); a refused one is one line.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ctitan/distributed/dist_env.h"
#include "fuzz_support.h"

namespace {

constexpr const char* kVariables[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_USE_AGENT_STORE"};

void check(bool ok, const char* what, const ctitan::distributed::DistEnv& e) {
  if (ok) return;
  std::fprintf(stderr, "accepted an impossible place (%s): rank %d of %d, local rank %d of %d, port %d, from %s\n",
               what, e.rank, e.world_size, e.local_rank, e.local_world_size, e.master_port, e.source.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest = ctitan::fuzz::as_text(data, size);
  for (const char* name : kVariables) {
    const auto end = rest.find('\0');
    const std::string value(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (value.empty()) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value.c_str(), 1);
    }
  }
  ctitan::fuzz::expect_ctitan_errors_only([] {
    const auto e = ctitan::distributed::read_dist_env();
    check(e.world_size >= 1 && e.rank >= 0 && e.rank < e.world_size, "rank outside the world", e);
    check(e.local_world_size >= 1 && e.local_rank >= 0, "no local place", e);
    check(e.master_port >= 1 && e.master_port <= 65535, "port", e);
  });
  return 0;
}
