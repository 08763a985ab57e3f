#pragma once
// The RPC functions of ctitan ps. Every process registers all of them before init_rpc (the
// registries must agree); each process serves the ones of its role by setting them here before
// init_rpc, which returns only once every process listens, so no call finds them unset.
//   ps.join(rank) -> (steps done, flat parameters, dataloader state)  on the server: a trainer's
//       start (the dataloader state is empty unless the server resumed from a checkpoint)
//   ps.push(rank, step, grads, tokens, loss_sum, latency, dataloader state)  on the server,
//       asynchronous: the round's shared future, completed with the new flat parameters
//   ps.embedding() -> RRef, ps.embed(RRef, tokens) -> (B, T, dim)  on the server, dist_autograd
//       mode: the embedding weight it owns, and a lookup in it
//   ps.hold() -> true                                       on a trainer, asynchronous: completes
//       when the trainer is done; the server holds one per trainer, so a trainer that dies fails
//       it at once (the agent fails every call pending on a lost peer)
#include <torch/torch.h>

#include <functional>
#include <tuple>

#include "ctitan/ps/gradient_round.h"
#include "ctitan/rpc/future.h"
#include "ctitan/rpc/rref.h"

namespace ctitan::ps {

struct Endpoints {
  std::function<std::tuple<int64_t, torch::Tensor, c10::Dict<std::string, at::Tensor>>(int64_t rank)> join;
  std::function<rpc::Future(Push push)> push;
  std::function<rpc::Future()> hold;
  std::function<rpc::RRef()> embedding;
};

void register_ps_functions();

// Installs this process's handlers; unset ones fail a call with "served by <role> only".
void serve(Endpoints endpoints);

}  // namespace ctitan::ps
