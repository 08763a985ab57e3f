#pragma once
// Joins a job: connects to the store, checks that every rank resolved the same config, builds the
// device mesh and its process groups. The counterpart of torchtitan's init_distributed.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>

#include "ctitan/config/job_config.h"
#include "ctitan/distributed/device_mesh.h"
#include "ctitan/distributed/dist_env.h"
#include "ctitan/distributed/parallel_dims.h"

namespace ctitan::distributed {

class Communicator;

// Where this process sits in the job. A single process is a world of one: the same context, with
// an in-process store and groups of one rank whose collectives never leave it.
struct DistContext {
  DistEnv env;
  ParallelDims dims;
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<Communicator> world;
  // Dims with size > 1; "dp" flattens dp_replicate x dp_shard; with cp, "dp_shard_cp" (FSDP's
  // group) and "dp_cp" (the ranks that compute the global batch between them).
  std::unique_ptr<DeviceMesh> mesh;

  // The ranks whose losses add up to the step's loss: the data-parallel ranks, each context-
  // parallel rank's share of its sequences, and under PP their pipelines' ranks too (those
  // without the last stage add an exact 0).
  std::shared_ptr<Communicator> loss_group() const {
    return mesh->group(dims.pp_enabled() ? "loss" : dims.cp_enabled() ? "dp_cp" : "dp");
  }
  // The ranks whose sums over tokens add up to the global batch's (dp, and cp's slices of it).
  std::shared_ptr<Communicator> batch_group() const { return mesh->group(dims.cp_enabled() ? "dp_cp" : "dp"); }
};

// Joins the job described by `env`, or makes a world of one when it names no other rank.
// Everything is bounded by comm.init_timeout_seconds: a rank that never arrives is an error
// naming it, never a hang.
std::unique_ptr<DistContext> init_distributed(const config::JobConfig& config, const DistEnv& env);

// The first step of every rendezvous round: claims RANK (a second process with the same RANK is
// an InputError naming both), publishes WORLD_SIZE and waits for every expected rank's, comparing
// them (a disagreement names both ranks and values). Any rank's failure is posted to the store,
// so every rank stops with the same one line at once instead of waiting for a timeout; a rank
// that never arrives is named after `timeout`. Exposed for tests.
void join_rendezvous(c10d::Store& store, int rank, int world_size, std::chrono::milliseconds timeout);

// Publishes this rank's resolved config and compares all ranks' with rank 0's. A mismatch throws
// InputError on every rank, naming the first differing rank and key. Exposed for tests.
void check_configs_agree(c10d::Store& store, int rank, int world_size, const std::string& config_toml);

// The first "section.key" at which two TOML texts printed by config::to_toml differ, with both
// values, or "" if they are equal.
std::string first_config_difference(const std::string& a, const std::string& b);

}  // namespace ctitan::distributed
