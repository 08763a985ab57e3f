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
//   ps.start(rank) -> (steps done, model, optimizer, lr_scheduler, dataloader states)  on the
//       server, dist_autograd mode: a trainer's start (empty states unless resumed)
//   ps.ready(rank, step)  on the server, dist_autograd mode, asynchronous: the trainer's backward
//       of the step is done; the future completes when every trainer's is, so that no trainer's
//       update of the embedding reaches a forward of the same step
//   ps.report(rank, step, tokens, loss_sum, grad_norm, latency, bytes, dataloader state)  on the
//       server, dist_autograd mode, asynchronous: a trainer's step done; the future completes when
//       every trainer's has (and after the checkpoint of that step, if one is due)
//   ps.trainer_state() -> (model, optimizer, lr_scheduler states)  on a trainer, dist_autograd
//       mode: what the server's checkpoint holds of it, fetched while it waits in ps.report
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

using WireState = c10::Dict<std::string, at::Tensor>;
// A dist_autograd trainer's own state: model (without the embedding), optimizer, lr_scheduler.
using TrainerStateWire = std::tuple<WireState, WireState, WireState>;

struct Endpoints {
  std::function<std::tuple<int64_t, torch::Tensor, c10::Dict<std::string, at::Tensor>>(int64_t rank)> join;
  std::function<rpc::Future(Push push)> push;
  std::function<rpc::Future()> hold;
  std::function<rpc::RRef()> embedding;
  std::function<std::tuple<int64_t, WireState, WireState, WireState, WireState>(int64_t rank)> start;
  std::function<rpc::Future(Push ready)> ready;
  std::function<rpc::Future(Push report)> report;
  std::function<TrainerStateWire()> trainer_state;
};

void register_ps_functions();

// Installs this process's handlers; unset ones fail a call with "served by <role> only".
void serve(Endpoints endpoints);

// For a trainer's catch block: when `e` says the server is gone (PeerLost), waits 3 s. The server
// usually ended the run with a line naming the cause (a lost trainer, a round timeout); a trainer
// exiting at once would be the launcher's "root cause" instead, and the launcher stops this
// process meanwhile.
void pause_if_server_lost(const std::exception& e);

}  // namespace ctitan::ps
