#pragma once
// Pipeline plans for transports that complete point-to-point operations in issue order (NCCL).
//
// NCCL runs the sends and receives between two ranks on one stream of each, in the order they
// were issued, tags ignored: each blocks that stream until the peer's matching operation runs.
// schedule.h's lowering posts a receive one compute action ahead, which Gloo tolerates (its
// receives complete in the background) but NCCL does not: under 1F1B with 2 stages, rank 0 issues
// RECV_B0 before SEND_F1 while rank 1 issues RECV_F1 before SEND_B0, and both streams wait forever.
//
// lower_in_issue_order() gives every pair of adjacent ranks one order of their transfers, the same
// on both sides: the order in which they happen in schedule.h's plan run under rendezvous
// semantics (simulate()), ties by tag. Each rank then issues its operations with a peer in that
// order, a receive no later than just before the compute that consumes it and a send just after
// the compute that produces it (or, when a later receive with that peer must be posted first, as
// late as that receive needs it). Compute order, and so every result, is schedule.h's.
#include <vector>

#include "ctitan/parallel/pipeline/schedule.h"
#include "ctitan/parallel/pipeline/schedule_sim.h"

namespace ctitan::parallel::pipeline {

// F/B orders (compute_orders) lowered for an issue-order transport; the same actions as lower(),
// in another order. std::logic_error if an order cannot be lowered (a B before the B it needs).
std::vector<std::vector<Action>> lower_in_issue_order(const std::vector<std::vector<Action>>& orders,
                                                      const PipeShape& shape);

// Virtual-time simulation under NCCL's semantics: the host never blocks (waiting on NCCL work
// makes the compute stream wait); each rank's F and B run in order on its compute stream, each
// after its input arrived; WaitX makes the compute stream wait for that send; for each pair of
// ranks the k-th point-to-point operation of one side pairs with the k-th of the other, and runs
// once both are issued, the compute each was issued after has finished, and the pair's previous
// transfer is done. Two sends or two receives paired, or a send paired with the receive of another
// tag, stop the simulation (NCCL would hang, or swap tensors): `stuck` names both sides.
SimResult simulate_in_issue_order(const std::vector<std::vector<Action>>& lowered, const PipeShape& shape,
                                  double t_f = 1, double t_b = 2);

}  // namespace ctitan::parallel::pipeline
