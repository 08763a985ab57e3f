#pragma once
// Pipeline schedules as data: which forward (F) and backward (B) each pp rank runs, in what
// order, and the point-to-point actions that move activations and gradients between stages.
// Pure functions, no processes or tensors: every rank computes every rank's plan, so each rank
// knows what its peers will post (docs/design/pipeline_parallel.md, decisions 5 and 6).
#include <cstdint>
#include <string>
#include <vector>

namespace ctitan::parallel::pipeline {

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved1F1B };

// Case-insensitive, as PyTorch's get_schedule_class. Anything else is a ConfigError naming the
// value and torchtitan's schedules ctitan lacks.
ScheduleKind parse_schedule(const std::string& name);
// "GPipe", "1F1B", "Interleaved1F1B": the spelling used in messages.
const char* schedule_name(ScheduleKind kind);

// F/B: compute. RecvX/SendX: post an asynchronous receive or send (never block). WaitX: wait for
// an earlier SendX of the same (stage, mb) to complete; under Gloo a send completes only once the
// peer has posted the matching receive, so this is the one non-compute action that can block.
enum class Op : uint8_t { F, B, RecvF, SendF, RecvB, SendB, WaitF, WaitB };

// `stage` is the stage that runs the action: the sender of a SendX, the receiver of a RecvX.
struct Action {
  Op op;
  int32_t stage;
  int32_t microbatch;
  bool operator==(const Action&) const = default;
};

struct PipeShape {
  int pp;               // pipeline ranks
  int stages_per_rank;  // v: 1 for GPipe/1F1B, >= 2 for Interleaved1F1B
  int microbatches;     // m per schedule run
  int stages() const { return pp * stages_per_rank; }
  // Loop style (torchtitan's default): rank r holds stages r, r + pp, r + 2pp, ...
  int rank_of(int stage) const { return stage % pp; }
};

// F/B order of every pp rank, index = pp rank. GPipe and 1F1B need stages_per_rank == 1
// (std::invalid_argument otherwise); Interleaved1F1B needs microbatches % rounds == 0 with
// rounds = max(1, m / pp), as PyTorch (std::invalid_argument otherwise). The orders are those of
// PyTorch's generators (docs/design/pipeline_parallel.md, decision 5).
std::vector<std::vector<Action>> compute_orders(ScheduleKind kind, const PipeShape& shape);

// Adds Recv/Send/Wait actions to compute orders, by ctitan's own rules
// (docs/design/pipeline_parallel.md, decision 6): a compute action's receive is posted one
// compute action ahead; sends follow their producing compute at once; WaitF(s, mb) follows
// B(s, mb); WaitB(s, mb) precedes B(s - pp, mb) when this rank holds that stage, else it goes
// at the end. Adjacent stages on the same rank (only with pp == 1) hand over locally,
// with no comm actions, as PyTorch's _add_send_recv does. std::logic_error on an order that
// runs a B before the B it depends on.
std::vector<std::vector<Action>> lower(const std::vector<std::vector<Action>>& orders, const PipeShape& shape);

// One action: "1F3", "0SEND_F2", "0RECV_B0", "1WAIT_B0".
std::string to_string(const Action& action);
// Space-separated: "0F0 0SEND_F0 0RECV_B0 0F1 ...".
std::string to_string(const std::vector<Action>& actions);

// The stage at the other end of a comm action: SendF/RecvB/WaitF talk to stage + 1, RecvF/SendB/
// WaitB to stage - 1. Its rank is shape.rank_of(peer_stage(a)). std::invalid_argument for F/B.
int peer_stage(const Action& comm);

// The p2p tag of a comm action: ((dir * S) + receiving stage) * m + mb, dir 0 for activations
// and 1 for gradients. A SendX and the RecvX it pairs with get the same tag (and so does the
// WaitX of the send); tags are unique per (direction, receiving stage, mb) within one run, so a
// mispairing shows up as a timeout naming the tag rather than as swapped tensors.
int32_t tag_of(const Action& comm, const PipeShape& shape);

}  // namespace ctitan::parallel::pipeline
