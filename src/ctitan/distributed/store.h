#pragma once
// The rendezvous store every rank of a job shares: c10d's TCPStore at MASTER_ADDR:MASTER_PORT,
// scoped by a prefix per restart round so that a restarted job never reads a dead round's keys.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "ctitan/distributed/dist_env.h"

namespace ctitan::distributed {

// Connects (or, when this rank hosts it, serves) within `timeout`; a peer that never appears is
// an InputError naming the address, not a hang.
c10::intrusive_ptr<c10d::Store> connect_store(const DistEnv& env, std::chrono::milliseconds timeout);

}  // namespace ctitan::distributed
