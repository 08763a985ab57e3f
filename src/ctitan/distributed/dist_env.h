#pragma once
// Where this process sits in a job, read from the environment of whichever launcher started it:
// `ctitan run` and torchrun (RANK, WORLD_SIZE, ...), Slurm (SLURM_PROCID, ...) or OpenMPI
// (OMPI_COMM_WORLD_*). No launcher variables means a single process.
#include <string>

namespace ctitan::distributed {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;                  // node index
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;               // TORCHELASTIC_RESTART_COUNT: which restart round this is
  // True when the launcher hosts the TCPStore (ctitan run, torchrun's agent store): every rank
  // connects as a client. Otherwise rank 0 hosts it.
  bool agent_store = false;
  std::string source = "none";         // which launcher's variables were found

  bool distributed() const { return world_size > 1; }
};

// Throws InputError naming the variable when a value is malformed or inconsistent
// (e.g. RANK >= WORLD_SIZE).
DistEnv read_dist_env();

}  // namespace ctitan::distributed
