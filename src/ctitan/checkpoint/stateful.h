#pragma once
// Stateful: what a job hands its CheckpointManager once, at construction, as torchtitan hands its
// CheckpointManager the model, optimizers, schedulers, dataloader and train state: every part
// that a checkpoint saves and restores, by name.
#include <map>
#include <string>

#include "ctitan/common/state_dict.h"

namespace ctitan::checkpoint {

using PartStates = std::map<std::string, StateDict>;
using PartLayouts = std::map<std::string, ShardLayouts>;

class Stateful {
 public:
  Stateful() = default;
  // The CheckpointManager keeps a pointer to its job: the job stays where it was built.
  Stateful(const Stateful&) = delete;
  Stateful& operator=(const Stateful&) = delete;
  virtual ~Stateful() = default;
  // Every part by name: the live tensors (a save snapshots them), per-rank parts as fresh copies.
  virtual PartStates state_dicts() const = 0;
  // Where each local tensor of a sharded part sits in its global tensor; parts of whole tensors
  // are absent.
  virtual PartLayouts shard_layouts() const { return {}; }
  // The tensors a load fills in place, with this job's shapes and dtypes: the live state, unless
  // the job cannot produce it yet when it resumes.
  virtual PartStates load_targets() const { return state_dicts(); }
  // Takes over what a load filled into load_targets().
  virtual void load_state_dicts(const PartStates& state) = 0;
};

}  // namespace ctitan::checkpoint
